"""EfficientNet (Tan & Le, 2019) as torchvision builds it: MBConv blocks (inverted residuals with SiLU and squeeze
and excitation) whose residual branches are dropped at random in training (stochastic depth), more often the deeper
the block; torchvision's module names, so its weight files load."""
from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from functools import partial

from minidl import nn

from ..ops import Conv2dNormActivation, SqueezeExcitation, StochasticDepth
from ._api import Default, WeightsEnum, load_weights, register_model
from ._utils import init_conv_and_norm, make_divisible, published

__all__ = ["EfficientNet", "EfficientNet_B0_Weights", "efficientnet_b0"]


class MBConvConfig:
    """One stage of the paper's Table 1: expansion ratio, kernel, first stride, channels (scaled by ``width_mult``)
    and block count (scaled by ``depth_mult``)."""

    def __init__(self, expand_ratio: float, kernel: int, stride: int, input_channels: int, out_channels: int,
                 num_layers: int, width_mult: float = 1.0, depth_mult: float = 1.0, block=None) -> None:
        self.expand_ratio, self.kernel, self.stride = expand_ratio, kernel, stride
        self.input_channels = self.adjust_channels(input_channels, width_mult)
        self.out_channels = self.adjust_channels(out_channels, width_mult)
        self.num_layers = int(math.ceil(num_layers * depth_mult))
        self.block = MBConv if block is None else block

    @staticmethod
    def adjust_channels(channels: int, width_mult: float, min_value: int | None = None) -> int:
        return make_divisible(channels * width_mult, 8, min_value)


class MBConv(nn.Module):
    """1x1 expansion (where the ratio is not 1), a depthwise convolution carrying the stride, squeeze and
    excitation (to a quarter of the input width), a linear 1x1 projection; where the shape is kept, the branch
    passes through stochastic depth (``stochastic_depth_prob``, per sample) before the input is added back."""

    def __init__(self, cnf: MBConvConfig, stochastic_depth_prob: float, norm_layer,
                 se_layer=SqueezeExcitation) -> None:
        super().__init__()
        if not 1 <= cnf.stride <= 2:
            raise ValueError("illegal stride value")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        expanded = cnf.adjust_channels(cnf.input_channels, cnf.expand_ratio)
        layers = []
        if expanded != cnf.input_channels:
            layers.append(Conv2dNormActivation(cnf.input_channels, expanded, kernel_size=1, norm_layer=norm_layer,
                                               activation_layer=nn.SiLU))
        layers += [Conv2dNormActivation(expanded, expanded, kernel_size=cnf.kernel, stride=cnf.stride,
                                        groups=expanded, norm_layer=norm_layer, activation_layer=nn.SiLU),
                   se_layer(expanded, max(1, cnf.input_channels // 4), activation=partial(nn.SiLU, inplace=True)),
                   Conv2dNormActivation(expanded, cnf.out_channels, kernel_size=1, norm_layer=norm_layer,
                                        activation_layer=None)]
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.out_channels = cnf.out_channels

    def forward(self, input):
        result = self.block(input)
        return self.stochastic_depth(result) + input if self.use_res_connect else result


class EfficientNet(nn.Module):
    """A SiLU 3x3 stem, one stage per config of ``inverted_residual_setting`` (its first block changes width and
    stride), a 1x1 convolution to ``last_channel`` (default four times the last width), global average pooling,
    dropout and a linear classifier. Block ``i`` of ``n`` drops its branch with probability
    ``stochastic_depth_prob * i / n``."""

    def __init__(self, inverted_residual_setting: Sequence, dropout: float, stochastic_depth_prob: float = 0.2,
                 num_classes: int = 1000, norm_layer=None, last_channel: int | None = None) -> None:
        super().__init__()
        if not inverted_residual_setting:
            raise ValueError("The inverted_residual_setting should not be empty")
        if not (isinstance(inverted_residual_setting, Sequence)
                and all(isinstance(s, MBConvConfig) for s in inverted_residual_setting)):
            raise TypeError("The inverted_residual_setting should be List[MBConvConfig]")
        norm_layer = nn.BatchNorm2d if norm_layer is None else norm_layer
        layers = [Conv2dNormActivation(3, inverted_residual_setting[0].input_channels, kernel_size=3, stride=2,
                                       norm_layer=norm_layer, activation_layer=nn.SiLU)]
        total_blocks = sum(cnf.num_layers for cnf in inverted_residual_setting)
        block_id = 0
        for cnf in inverted_residual_setting:
            stage = []
            for _ in range(cnf.num_layers):
                block_cnf = copy.copy(cnf)
                if stage:   # later blocks of a stage keep its width and resolution
                    block_cnf.input_channels, block_cnf.stride = block_cnf.out_channels, 1
                sd_prob = stochastic_depth_prob * float(block_id) / total_blocks
                stage.append(block_cnf.block(block_cnf, sd_prob, norm_layer))
                block_id += 1
            layers.append(nn.Sequential(*stage))
        last_in = inverted_residual_setting[-1].out_channels
        last_out = 4 * last_in if last_channel is None else last_channel
        layers.append(Conv2dNormActivation(last_in, last_out, kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True), nn.Linear(last_out, num_classes))
        init_conv_and_norm(self)
        for module in self.modules():
            if isinstance(module, nn.Linear):   # U(-1/sqrt(out), 1/sqrt(out)), as the reference implementation
                bound = 1.0 / math.sqrt(module.out_features)
                nn.init.uniform_(module.weight, -bound, bound)
                nn.init.zeros_(module.bias)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


def _b_config(width_mult: float, depth_mult: float) -> list:
    """EfficientNet-B0's stages (B1-B7 scale their widths and depths)."""
    conf = partial(MBConvConfig, width_mult=width_mult, depth_mult=depth_mult)
    return [conf(1, 3, 1, 32, 16, 1), conf(6, 3, 2, 16, 24, 2), conf(6, 5, 2, 24, 40, 2), conf(6, 3, 2, 40, 80, 3),
            conf(6, 5, 1, 80, 112, 3), conf(6, 5, 2, 112, 192, 4), conf(6, 3, 1, 192, 320, 1)]


class EfficientNet_B0_Weights(WeightsEnum):
    IMAGENET1K_V1 = published("efficientnet_b0_rwightman-7f5810bc.pth", 5288548, interpolation="bicubic")
    DEFAULT = Default("IMAGENET1K_V1")


@register_model(EfficientNet_B0_Weights)
def efficientnet_b0(*, weights=None, progress: bool = True, **kwargs) -> EfficientNet:
    model = EfficientNet(_b_config(1.0, 1.0), kwargs.pop("dropout", 0.2), last_channel=None, **kwargs)
    return load_weights(model, weights, EfficientNet_B0_Weights)
