"""MobileNetV3 (Howard et al., 2019) as torchvision builds it: inverted residual blocks with optional squeeze and
excitation and hard-swish, batch norm with eps 1e-3 and momentum 0.01; torchvision's module names, so its weight
files load."""
from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from minidl import nn

from ..ops import Conv2dNormActivation, SqueezeExcitation
from ._api import Default, WeightsEnum, load_weights, register_model
from ._utils import init_conv_and_norm, init_linear_normal, make_divisible, published

__all__ = ["MobileNetV3", "MobileNet_V3_Small_Weights", "mobilenet_v3_small"]


class InvertedResidualConfig:
    """One row of the paper's Tables 1-2: channels (scaled by ``width_mult``), kernel, squeeze-excitation, hard-swish
    ("HS") or ReLU ("RE"), stride and dilation."""

    def __init__(self, input_channels: int, kernel: int, expanded_channels: int, out_channels: int, use_se: bool,
                 activation: str, stride: int, dilation: int, width_mult: float) -> None:
        self.input_channels = self.adjust_channels(input_channels, width_mult)
        self.kernel = kernel
        self.expanded_channels = self.adjust_channels(expanded_channels, width_mult)
        self.out_channels = self.adjust_channels(out_channels, width_mult)
        self.use_se, self.use_hs = use_se, activation == "HS"
        self.stride, self.dilation = stride, dilation

    @staticmethod
    def adjust_channels(channels: int, width_mult: float) -> int:
        return make_divisible(channels * width_mult, 8)


class InvertedResidual(nn.Module):
    """1x1 expansion (where the width changes), a depthwise convolution (strided, or dilated instead), squeeze and
    excitation gated by a hard sigmoid, and a linear 1x1 projection; the input added back where the shape is kept."""

    def __init__(self, cnf: InvertedResidualConfig, norm_layer,
                 se_layer=partial(SqueezeExcitation, scale_activation=nn.Hardsigmoid)) -> None:
        super().__init__()
        if not 1 <= cnf.stride <= 2:
            raise ValueError("illegal stride value")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        activation = nn.Hardswish if cnf.use_hs else nn.ReLU
        layers = []
        if cnf.expanded_channels != cnf.input_channels:
            layers.append(Conv2dNormActivation(cnf.input_channels, cnf.expanded_channels, kernel_size=1,
                                               norm_layer=norm_layer, activation_layer=activation))
        layers.append(Conv2dNormActivation(cnf.expanded_channels, cnf.expanded_channels, kernel_size=cnf.kernel,
                                           stride=1 if cnf.dilation > 1 else cnf.stride, dilation=cnf.dilation,
                                           groups=cnf.expanded_channels, norm_layer=norm_layer,
                                           activation_layer=activation))
        if cnf.use_se:
            layers.append(se_layer(cnf.expanded_channels, make_divisible(cnf.expanded_channels // 4, 8)))
        layers.append(Conv2dNormActivation(cnf.expanded_channels, cnf.out_channels, kernel_size=1,
                                           norm_layer=norm_layer, activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.out_channels = cnf.out_channels
        self._is_cn = cnf.stride > 1

    def forward(self, input):
        result = self.block(input)
        return result + input if self.use_res_connect else result


class MobileNetV3(nn.Module):
    """A hard-swish 3x3 stem, a block per config of ``inverted_residual_setting``, a 1x1 convolution to six times
    the last width, global average pooling, and a classifier through ``last_channel`` hidden units with dropout.
    Extra keyword arguments (the builder's ``width_mult``, ``reduced_tail``, ``dilated``) are accepted and unused."""

    def __init__(self, inverted_residual_setting: list, last_channel: int, num_classes: int = 1000, block=None,
                 norm_layer=None, dropout: float = 0.2, **kwargs) -> None:
        super().__init__()
        if not inverted_residual_setting:
            raise ValueError("The inverted_residual_setting should not be empty")
        if not (isinstance(inverted_residual_setting, Sequence)
                and all(isinstance(s, InvertedResidualConfig) for s in inverted_residual_setting)):
            raise TypeError("The inverted_residual_setting should be List[InvertedResidualConfig]")
        block = InvertedResidual if block is None else block
        norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01) if norm_layer is None else norm_layer
        first, last = inverted_residual_setting[0].input_channels, inverted_residual_setting[-1].out_channels
        layers = [Conv2dNormActivation(3, first, kernel_size=3, stride=2, norm_layer=norm_layer,
                                       activation_layer=nn.Hardswish)]
        layers += [block(cnf, norm_layer) for cnf in inverted_residual_setting]
        layers.append(Conv2dNormActivation(last, 6 * last, kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * last, last_channel), nn.Hardswish(inplace=True),
                                        nn.Dropout(p=dropout, inplace=True), nn.Linear(last_channel, num_classes))
        init_conv_and_norm(self)
        init_linear_normal(self)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def _small_config(width_mult: float = 1.0, reduced_tail: bool = False, dilated: bool = False, **kwargs):
    """MobileNetV3-Small's blocks and classifier width; ``reduced_tail`` halves the last stage's widths and
    ``dilated`` dilates it instead of striding (both for detection and segmentation backbones)."""
    r, d = (2 if reduced_tail else 1), (2 if dilated else 1)
    conf = partial(InvertedResidualConfig, width_mult=width_mult)
    setting = [conf(16, 3, 16, 16, True, "RE", 2, 1), conf(16, 3, 72, 24, False, "RE", 2, 1),
               conf(24, 3, 88, 24, False, "RE", 1, 1), conf(24, 5, 96, 40, True, "HS", 2, 1),
               conf(40, 5, 240, 40, True, "HS", 1, 1), conf(40, 5, 240, 40, True, "HS", 1, 1),
               conf(40, 5, 120, 48, True, "HS", 1, 1), conf(48, 5, 144, 48, True, "HS", 1, 1),
               conf(48, 5, 288, 96 // r, True, "HS", 2, d), conf(96 // r, 5, 576 // r, 96 // r, True, "HS", 1, d),
               conf(96 // r, 5, 576 // r, 96 // r, True, "HS", 1, d)]
    return setting, InvertedResidualConfig.adjust_channels(1024 // r, width_mult)


class MobileNet_V3_Small_Weights(WeightsEnum):
    IMAGENET1K_V1 = published("mobilenet_v3_small-047dcff4.pth", 2542856)
    DEFAULT = Default("IMAGENET1K_V1")


@register_model(MobileNet_V3_Small_Weights)
def mobilenet_v3_small(*, weights=None, progress: bool = True, **kwargs) -> MobileNetV3:
    setting, last_channel = _small_config(**kwargs)
    return load_weights(MobileNetV3(setting, last_channel, **kwargs), weights, MobileNet_V3_Small_Weights)
