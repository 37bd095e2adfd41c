"""minidl.vision.models against the real torchvision (0.29.1 on torch 2.14.1), through what it recorded:
tests/torchvision_record.py ran each model beside it (torchvision cannot import beside the suite's CPU torch) and
wrote every state dict's names, shapes and dtypes, the eval-mode outputs under synthetic weights
(tests/torchvision_reference.py), and a ResNet-18 fine-tuned on the embedded digits.

Here each minidl model must have exactly those state-dict entries, torchvision's documented parameter count, and,
given the same weights, the same outputs (float32: 1e-4 of the outputs' scale; float64: 1e-10), and the fine-tuning
the same losses in float64. Weights reach minidl as a user's would: as a ``.pth`` torch saved, or a
``.safetensors`` file, passed as ``weights=``."""
import json
import os

import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.vision import models

import torchvision_reference as ref

DATA = os.path.join(os.path.dirname(__file__), "data")
with open(os.path.join(DATA, "torchvision.json")) as _f:
    RECORDED = json.load(_f)
OUTPUTS = np.load(os.path.join(DATA, "torchvision.npz"))
# torchvision's documentation's parameter counts (its model pages), beside what it recorded
DOCUMENTED = {"resnet18": 11_689_512, "resnet34": 21_797_672, "resnet50": 25_557_032, "resnet101": 44_549_160,
              "wide_resnet50_2": 68_883_240, "resnext50_32x4d": 25_028_904, "mobilenet_v2": 3_504_872,
              "mobilenet_v3_small": 2_542_856, "vgg11_bn": 132_868_840, "efficientnet_b0": 5_288_548,
              "vit_b_16": 86_567_656, "convnext_tiny": 28_589_128}


def shapes_of(name: str) -> dict:
    return {key: tuple(shape) for key, shape, _ in RECORDED["models"][name]["state_dict"]}


def synthetic_minidl_state(name: str) -> dict:
    return {key: minidl.from_numpy(value) for key, value in ref.synthetic_state(shapes_of(name)).items()}


@pytest.mark.parametrize("name", ref.MODELS)
def test_state_dict_is_torchvisions(name):
    model = getattr(models, name)()
    ours = [[key, list(value.shape), value.dtype.name] for key, value in model.state_dict().items()]
    assert ours == RECORDED["models"][name]["state_dict"]   # names, order, shapes, dtypes
    count = sum(p.numel() for p in model.parameters())
    assert count == DOCUMENTED[name] == RECORDED["models"][name]["parameters"]


@pytest.mark.parametrize("name", ref.MODELS)
def test_eval_outputs_equal_torchvisions(name):
    model = getattr(models, name)()
    model.load_state_dict(synthetic_minidl_state(name), strict=True)
    model.eval()
    images = ref.image_batch(name)
    with minidl.no_grad():
        out32 = model(minidl.from_numpy(images)).numpy()
        out64 = model.double()(minidl.from_numpy(images.astype(np.float64))).numpy()
    want32, want64 = OUTPUTS[f"{name}/float32"], OUTPUTS[f"{name}/float64"]
    assert out32.dtype == np.float32 and out64.dtype == np.float64
    np.testing.assert_allclose(out32, want32, rtol=0, atol=1e-4 * np.abs(want64).max())
    np.testing.assert_allclose(out64, want64, rtol=0, atol=1e-10 * np.abs(want64).max())


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_weights_from_a_file(name, suffix, tmp_path):
    torch = pytest.importorskip("torch")
    path = str(tmp_path / f"{name}{suffix}")
    state = {key: torch.from_numpy(value) for key, value in ref.synthetic_state(shapes_of(name)).items()}
    if suffix == ".pth":
        torch.save(state, path)   # as torchvision's published weight files are written
    else:
        from safetensors.torch import save_file
        save_file(state, path)
    model = getattr(models, name)(weights=path).eval()
    with minidl.no_grad():
        out = model(minidl.from_numpy(ref.image_batch(name))).numpy()
    want = OUTPUTS[f"{name}/float64"]
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-4 * np.abs(want).max())


def test_a_model_round_trips_to_torch(tmp_path):
    """minidl's default save format is safetensors: torch reads it with the safetensors package, writes it back
    as a .pth, and minidl reads that bit for bit."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file
    model = models.resnet18()
    model.load_state_dict(synthetic_minidl_state("resnet18"))
    minidl.save(model.state_dict(), str(tmp_path / "ours.safetensors"))
    in_torch = load_file(str(tmp_path / "ours.safetensors"))
    assert {k: (list(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in in_torch.items()} == \
        {key: (shape, dtype) for key, shape, dtype in RECORDED["models"]["resnet18"]["state_dict"]}
    torch.save(in_torch, str(tmp_path / "back.pth"))
    again = models.resnet18(weights=str(tmp_path / "back.pth"))
    for (key, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=key)


def test_resnet18_fine_tunes_as_torchvisions():
    spec = ref.FINETUNE
    model = getattr(models, spec["model"])(num_classes=spec["num_classes"])
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict({k: minidl.from_numpy(v) for k, v in ref.synthetic_state(shapes).items()})
    model.double().train()
    optimizer = minidl.optim.SGD(model.parameters(), lr=spec["lr"], momentum=spec["momentum"])
    losses = []
    for images, labels in ref.finetune_batches():
        loss = nn.functional.cross_entropy(model(minidl.from_numpy(images)), minidl.from_numpy(labels))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    np.testing.assert_allclose(losses, OUTPUTS["finetune/losses"], rtol=1e-10, atol=0)
    np.testing.assert_allclose(model.fc.weight.detach().numpy(), OUTPUTS["finetune/fc.weight"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(model.bn1.running_var.numpy(), OUTPUTS["finetune/bn1.running_var"], rtol=1e-10)


@pytest.mark.parametrize("name", ["resnet50", "vit_b_16", "efficientnet_b0", "convnext_tiny"])
def test_weight_sets_preprocess_as_torchvisions(name):
    builder = models.get_model_builder(name)
    recorded = RECORDED["models"][name]["weights"]
    assert list(builder.weights_enum.__members__) == list(recorded)
    for weight_name, facts in recorded.items():
        weights = builder.weights_enum[weight_name]
        preset = weights.transforms()
        assert (preset.crop_size, preset.resize_size) == ([facts["crop_size"]], [facts["resize_size"]])
        assert (list(preset.mean), list(preset.std)) == (facts["mean"], facts["std"])
        assert preset.interpolation.value == facts["interpolation"]
        assert weights.url == facts["url"] and weights.meta["num_params"] == facts["num_params"]


def test_naming_a_weight_set_says_where_to_fetch_it():
    with pytest.raises(RuntimeError, match="downloads nothing.*https://download.pytorch.org/models/resnet18"):
        models.resnet18(weights="IMAGENET1K_V1")
    with pytest.raises(RuntimeError, match="downloads nothing"):
        models.resnet18(weights=models.ResNet18_Weights.IMAGENET1K_V1)
    with pytest.raises(FileNotFoundError, match="no such file"):
        models.resnet18(weights="/nonexistent/resnet18.pth")


def test_weights_of_the_wrong_kind_are_refused(tmp_path):
    with pytest.raises(TypeError, match="expected ResNet50_Weights but received ResNet18_Weights"):  # torchvision's
        models.resnet50(weights=models.ResNet18_Weights.IMAGENET1K_V1)
    with pytest.raises(TypeError, match="a file path or a ResNet18_Weights; got True"):
        models.resnet18(weights=True)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        models.resnet18(weights=tmp_path)


def test_a_checkpoint_of_another_architecture_names_every_mismatch(tmp_path):
    path = str(tmp_path / "r34.safetensors")
    minidl.save(models.resnet34().state_dict(), path)
    with pytest.raises(RuntimeError) as info:
        models.resnet18(weights=path)
    message = str(info.value)
    assert "Unexpected key(s)" in message and "layer1.2.conv1.weight" in message
    small = models.resnet18(num_classes=10).state_dict()
    minidl.save(small, path)
    with pytest.raises(RuntimeError, match=r"size mismatch for fc.weight.*\[10, 512\].*\[1000, 512\]"):
        models.resnet18(weights=path)
