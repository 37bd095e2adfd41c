"""VGG (Simonyan & Zisserman, 2014) as torchvision builds it: stacks of 3x3 convolutions between 2x2 max pools,
pooled to 7 x 7 and classified by three linear layers; torchvision's module names, so its weight files load."""
from __future__ import annotations

from minidl import nn

from ._api import Default, WeightsEnum, load_weights, register_model
from ._utils import init_conv_and_norm, init_linear_normal, published

__all__ = ["VGG", "VGG11_BN_Weights", "vgg11_bn"]

# the paper's configuration A (VGG-11): output channels of each 3x3 convolution, "M" a max pool
CFG_A = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


class VGG(nn.Module):
    """``features`` (the convolutions), adaptive average pooling to 7 x 7 (any input of at least 32 x 32 works),
    and a classifier of two 4096-wide hidden layers with ReLU and dropout."""

    def __init__(self, features: nn.Module, num_classes: int = 1000, init_weights: bool = True,
                 dropout: float = 0.5) -> None:
        super().__init__()
        self.features = features
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(p=dropout),
                                        nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(p=dropout),
                                        nn.Linear(4096, num_classes))
        if init_weights:
            init_conv_and_norm(self)
            init_linear_normal(self)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def make_layers(cfg: list, batch_norm: bool = False) -> nn.Sequential:
    """The convolutional part of configuration ``cfg``: each 3x3 convolution (padding 1) followed by batch norm
    when ``batch_norm``, then ReLU."""
    layers, in_channels = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            continue
        layers.append(nn.Conv2d(in_channels, v, kernel_size=3, padding=1))
        layers += [nn.BatchNorm2d(v), nn.ReLU(inplace=True)] if batch_norm else [nn.ReLU(inplace=True)]
        in_channels = v
    return nn.Sequential(*layers)


class VGG11_BN_Weights(WeightsEnum):
    IMAGENET1K_V1 = published("vgg11_bn-6002323d.pth", 132868840)
    DEFAULT = Default("IMAGENET1K_V1")


@register_model(VGG11_BN_Weights)
def vgg11_bn(*, weights=None, progress: bool = True, **kwargs) -> VGG:
    if weights is not None:
        kwargs["init_weights"] = False   # the weights loaded replace every value
    return load_weights(VGG(make_layers(CFG_A, batch_norm=True), **kwargs), weights, VGG11_BN_Weights)
