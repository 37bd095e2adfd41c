"""What several of torchvision's convolutional models share: where their weight sets are published, their
channel rounding and their initialisation."""
from __future__ import annotations

from minidl import nn

from ._api import Weights, imagenet_preset


def published(file: str, num_params: int, resize_size: int = 256, interpolation: str = "bilinear") -> Weights:
    """A weight set torchvision publishes at download.pytorch.org/models/``file``, evaluated on ImageNet's 224 x 224
    center crops of images resized to ``resize_size``."""
    return Weights(url="https://download.pytorch.org/models/" + file,
                   transforms=imagenet_preset(224, resize_size, interpolation), meta={"num_params": num_params})


def make_divisible(value: float, divisor: int, min_value: int | None = None) -> int:
    """``value`` rounded to the nearest multiple of ``divisor`` (at least ``min_value``), never more than 10% below
    it: the channel counts of the MobileNets and EfficientNets, scaled by a width multiplier, stay hardware-friendly
    and match the published weights' shapes."""
    min_value = divisor if min_value is None else min_value
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def init_conv_and_norm(model: nn.Module) -> None:
    """torchvision's convolution scheme: He-normal weights over the fan-out (ReLU's gain), zero biases, and norm
    layers starting as the identity (scale 1, shift 0)."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (nn.BatchNorm2d, nn.GroupNorm)) and module.weight is not None:
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


def init_linear_normal(model: nn.Module, std: float = 0.01) -> None:
    """Classifier layers N(0, ``std``) with zero biases, as VGG and the MobileNets start theirs."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, std)
            nn.init.zeros_(module.bias)
