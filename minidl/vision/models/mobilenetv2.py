"""MobileNetV2 (Sandler et al., 2018) as torchvision builds it: inverted residual blocks (expand, depthwise,
linear projection) with ReLU6; torchvision's module names, so its weight files load."""
from __future__ import annotations

from minidl import nn

from ..ops import Conv2dNormActivation
from ._api import Default, WeightsEnum, load_weights, register_model
from ._utils import init_conv_and_norm, init_linear_normal, make_divisible, published

__all__ = ["MobileNetV2", "MobileNet_V2_Weights", "mobilenet_v2"]

# the paper's Table 2: expansion t, output channels c, repeats n, first stride s
DEFAULT_SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                   [6, 320, 1, 1]]


class InvertedResidual(nn.Module):
    """A 1x1 expansion by ``expand_ratio`` (skipped at 1), a 3x3 depthwise convolution carrying the stride, and a
    linear 1x1 projection; the input is added back where the shape is kept."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int, norm_layer=None) -> None:
        super().__init__()
        if stride not in [1, 2]:
            raise ValueError(f"stride should be 1 or 2 instead of {stride}")
        norm_layer = nn.BatchNorm2d if norm_layer is None else norm_layer
        self.stride = stride
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = []
        if expand_ratio != 1:
            layers.append(Conv2dNormActivation(inp, hidden_dim, kernel_size=1, norm_layer=norm_layer,
                                               activation_layer=nn.ReLU6))
        layers += [Conv2dNormActivation(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim,
                                        norm_layer=norm_layer, activation_layer=nn.ReLU6),
                   nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False), norm_layer(oup)]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup
        self._is_cn = stride > 1

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """A strided 3x3 stem, the inverted residual stages of ``inverted_residual_setting`` (rows t, c, n, s), a 1x1
    convolution to ``last_channel`` (1280), global average pooling, dropout and a linear classifier; every width is
    scaled by ``width_mult`` and rounded to a multiple of ``round_nearest``."""

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, inverted_residual_setting=None,
                 round_nearest: int = 8, block=None, norm_layer=None, dropout: float = 0.2) -> None:
        super().__init__()
        block = InvertedResidual if block is None else block
        norm_layer = nn.BatchNorm2d if norm_layer is None else norm_layer
        setting = DEFAULT_SETTING if inverted_residual_setting is None else inverted_residual_setting
        if len(setting) == 0 or len(setting[0]) != 4:
            raise ValueError(f"inverted_residual_setting should be non-empty or a 4-element list, got {setting}")
        input_channel = make_divisible(32 * width_mult, round_nearest)
        self.last_channel = make_divisible(1280 * max(1.0, width_mult), round_nearest)
        features = [Conv2dNormActivation(3, input_channel, stride=2, norm_layer=norm_layer,
                                         activation_layer=nn.ReLU6)]
        for t, c, n, s in setting:
            output_channel = make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(block(input_channel, output_channel, s if i == 0 else 1, expand_ratio=t,
                                      norm_layer=norm_layer))
                input_channel = output_channel
        features.append(Conv2dNormActivation(input_channel, self.last_channel, kernel_size=1, norm_layer=norm_layer,
                                             activation_layer=nn.ReLU6))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes))
        init_conv_and_norm(self)
        init_linear_normal(self)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(x.flatten(1))


class MobileNet_V2_Weights(WeightsEnum):
    IMAGENET1K_V1 = published("mobilenet_v2-b0353104.pth", 3504872)
    IMAGENET1K_V2 = published("mobilenet_v2-7ebf99e0.pth", 3504872, resize_size=232)
    DEFAULT = Default("IMAGENET1K_V2")


@register_model(MobileNet_V2_Weights)
def mobilenet_v2(*, weights=None, progress: bool = True, **kwargs) -> MobileNetV2:
    return load_weights(MobileNetV2(**kwargs), weights, MobileNet_V2_Weights)
