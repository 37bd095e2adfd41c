"""What tests/torchvision_record.py (run beside the real torchvision) and tests/test_vision_models_torchvision.py
(run in the suite, without torchvision) must build identically: synthetic weights for a state dict, the inputs,
and the fine-tuning batches. Pure numpy, so both sides draw the same numbers on any machine.

Weights are drawn per entry from a generator seeded by the entry's name, so they do not depend on the order of
the state dict: convolution and linear weights N(0, 1/fan_in), biases N(0, 0.05), norm weights U(0.5, 1.5),
batch-norm running means N(0, 0.1) and variances U(0.5, 1.5) (non-trivial statistics, so eval mode is tested),
tokens and position embeddings N(0, 0.02), ConvNeXt's layer scales U(0.1, 0.5).
"""
import gzip
import os
import zlib

import numpy as np

MODELS = ["resnet18", "resnet34", "resnet50", "resnet101", "wide_resnet50_2", "resnext50_32x4d", "mobilenet_v2",
          "mobilenet_v3_small", "vgg11_bn", "efficientnet_b0", "vit_b_16", "convnext_tiny"]
SEED = 2026
FINETUNE = dict(model="resnet18", num_classes=10, batch=16, steps=4, lr=0.01, momentum=0.9, size=32)
DIGITS = os.path.join(os.path.dirname(__file__), "..", "minidl", "vision", "data", "digits.csv.gz")


def _generator(name: str, seed: int = SEED):
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def synthetic_entry(name: str, shape: tuple, seed: int = SEED) -> np.ndarray:
    """The value of state-dict entry ``name`` (float32, or int64 for batch-norm counters)."""
    rng, last = _generator(name, seed), name.rsplit(".", 1)[-1]
    if last == "num_batches_tracked":
        return np.array(7, np.int64)
    if last == "running_mean":
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    if last == "running_var" or (last == "weight" and len(shape) == 1):
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if last == "layer_scale":
        return rng.uniform(0.1, 0.5, shape).astype(np.float32)
    if last in ("bias", "in_proj_bias"):
        return (0.05 * rng.standard_normal(shape)).astype(np.float32)
    if last in ("class_token", "pos_embedding"):
        return (0.02 * rng.standard_normal(shape)).astype(np.float32)
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def synthetic_state(shapes: dict, seed: int = SEED) -> dict:
    """name -> array for every (name, shape) of a state dict."""
    return {name: synthetic_entry(name, tuple(shape), seed) for name, shape in shapes.items()}


def image_batch(model: str) -> np.ndarray:
    """The float32 images each model is checked on: 2 x 3 x 224 x 224 for ViT-B/16 (its size is fixed), else
    2 x 3 x 64 x 64 (the convolutional models take any size; small keeps the suite fast)."""
    size = 224 if model.startswith("vit") else 64
    return _generator("images/" + model).standard_normal((2, 3, size, size)).astype(np.float32)


def finetune_batches() -> list:
    """(images, labels) per fine-tuning step: the embedded 8x8 digits, upscaled (nearest) to 32 x 32, scaled to
    [0, 1], normalised with ImageNet's mean and std, copied to three channels; float64."""
    with gzip.open(DIGITS, "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    n, size = FINETUNE["batch"] * FINETUNE["steps"], FINETUNE["size"]
    images = table[:n, :64].reshape(n, 1, 8, 8) / 16.0
    images = images.repeat(size // 8, axis=2).repeat(size // 8, axis=3).repeat(3, axis=1)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    images = (images - mean[:, None, None]) / std[:, None, None]
    labels = table[:n, 64].astype(np.int64)
    b = FINETUNE["batch"]
    return [(images[i:i + b], labels[i:i + b]) for i in range(0, n, b)]
