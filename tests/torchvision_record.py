"""Records what the real torchvision computes, for tests/test_vision_models_torchvision.py (which runs without it).

torchvision cannot import beside the suite's CPU torch 2.13 (PyPI's torchvision needs a CUDA torch), so this script
runs once in its own venv and writes tests/data/torchvision.json and tests/data/torchvision.npz:

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch==2.14.1 torchvision==0.29.1 numpy
    /tmp/tv/bin/python tests/torchvision_record.py

For every model: its state dict's names, shapes and dtypes, its parameter count, each weight set's preprocessing,
and its eval-mode outputs (float32 and float64) under tests/torchvision_reference.py's synthetic weights; and a
ResNet-18 fine-tuned on the embedded digits in float64 (its losses and final classifier).
"""
import json
import os
import sys

import numpy as np
import torch
import torchvision
from torchvision import models

sys.path.insert(0, os.path.dirname(__file__))
import torchvision_reference as ref  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "data")


def weight_sets(name: str) -> dict:
    sets = {}
    for weights in models.get_model_weights(name):
        t = weights.transforms()
        sets[weights.name] = dict(crop_size=t.crop_size[0], resize_size=t.resize_size[0], mean=list(t.mean),
                                  std=list(t.std), interpolation=t.interpolation.value,
                                  num_params=weights.meta["num_params"], url=weights.url)
    return sets


def record_model(name: str, arrays: dict) -> dict:
    model = getattr(models, name)()
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict({k: torch.from_numpy(v) for k, v in ref.synthetic_state(shapes).items()}, strict=True)
    entries = [[k, list(v.shape), str(v.dtype).removeprefix("torch.")] for k, v in model.state_dict().items()]
    images = ref.image_batch(name)
    with torch.no_grad():
        arrays[f"{name}/float32"] = model.eval()(torch.from_numpy(images)).numpy()
        arrays[f"{name}/float64"] = model.double()(torch.from_numpy(images).double()).numpy()
    return dict(state_dict=entries, parameters=sum(p.numel() for p in model.parameters()),
                weights=weight_sets(name))


def record_finetune(arrays: dict) -> None:
    spec = ref.FINETUNE
    model = getattr(models, spec["model"])(num_classes=spec["num_classes"])
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict({k: torch.from_numpy(v) for k, v in ref.synthetic_state(shapes).items()})
    model.double().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=spec["lr"], momentum=spec["momentum"])
    losses = []
    for images, labels in ref.finetune_batches():
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(images)), torch.from_numpy(labels))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    arrays["finetune/losses"] = np.array(losses)
    arrays["finetune/fc.weight"] = model.fc.weight.detach().numpy()
    arrays["finetune/bn1.running_var"] = model.bn1.running_var.numpy()


def main() -> None:
    torch.manual_seed(0)
    arrays, table = {}, {"torch": torch.__version__, "torchvision": torchvision.__version__, "models": {}}
    for name in ref.MODELS:
        table["models"][name] = record_model(name, arrays)
        print(name, table["models"][name]["parameters"], flush=True)
    record_finetune(arrays)
    with open(os.path.join(OUT, "torchvision.json"), "w") as f:
        json.dump(table, f, indent=1)
    np.savez_compressed(os.path.join(OUT, "torchvision.npz"), **arrays)


if __name__ == "__main__":
    main()
