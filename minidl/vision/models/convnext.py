"""ConvNeXt (Liu et al., 2022, https://arxiv.org/abs/2201.03545) as torchvision builds it: its classes,
arguments, state-dict names and initialisation, so that torchvision's checkpoints load unchanged.

A 4 x 4 patchifying stem, then stages of blocks (a 7 x 7 depthwise convolution, LayerNorm, and an inverted
bottleneck of two Linear layers over channels-last features, scaled by a learnt per-channel ``layer_scale`` and
dropped by stochastic depth) separated by LayerNorm + 2 x 2 strided downsampling convolutions.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Callable, Optional

import minidl
from minidl import nn
from minidl.nn import functional as F

from ..ops import Conv2dNormActivation, Permute, StochasticDepth
from ._api import Default, WeightsEnum, load_weights, register_model
from ._utils import published

__all__ = ["ConvNeXt", "ConvNeXt_Tiny_Weights", "convnext_tiny"]


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of (N, C, H, W) feature maps, at every position."""

    def forward(self, x):
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    """input + StochasticDepth(layer_scale * block(input)); ``layer_scale`` starts every channel at the
    ``layer_scale`` value, small, so that each block starts near the identity."""

    def __init__(self, dim: int, layer_scale: float, stochastic_depth_prob: float,
                 norm_layer: Optional[Callable[..., nn.Module]] = None) -> None:
        super().__init__()
        if norm_layer is None:
            norm_layer = partial(nn.LayerNorm, eps=1e-6)
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True),
            Permute([0, 2, 3, 1]),
            norm_layer(dim),
            nn.Linear(dim, 4 * dim, bias=True),
            nn.GELU(),
            nn.Linear(4 * dim, dim, bias=True),
            Permute([0, 3, 1, 2]),
        )
        self.layer_scale = nn.Parameter(minidl.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def forward(self, input):
        return self.stochastic_depth(self.layer_scale * self.block(input)) + input


class CNBlockConfig:
    """One stage: ``num_layers`` blocks of ``input_channels``, then a downsampling to ``out_channels`` (None:
    the last stage, no downsampling)."""

    def __init__(self, input_channels: int, out_channels: Optional[int], num_layers: int) -> None:
        self.input_channels = input_channels
        self.out_channels = out_channels
        self.num_layers = num_layers

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(input_channels={self.input_channels}, out_channels={self.out_channels}, "
                f"num_layers={self.num_layers})")


class ConvNeXt(nn.Module):
    """ConvNeXt from its stages' ``block_setting``. Block i of n drops its branch with probability
    ``stochastic_depth_prob * i / (n - 1)``: none for the first, the whole rate for the last. Convolution and
    Linear weights start truncated-normal (std 0.02), their biases at zero."""

    def __init__(self, block_setting: list, stochastic_depth_prob: float = 0.0, layer_scale: float = 1e-6,
                 num_classes: int = 1000, block: Optional[Callable[..., nn.Module]] = None,
                 norm_layer: Optional[Callable[..., nn.Module]] = None, **kwargs) -> None:
        super().__init__()
        if not block_setting:
            raise ValueError("The block_setting should not be empty")
        if not (isinstance(block_setting, Sequence) and all(isinstance(s, CNBlockConfig) for s in block_setting)):
            raise TypeError("The block_setting should be List[CNBlockConfig]")
        block = CNBlock if block is None else block
        norm_layer = partial(LayerNorm2d, eps=1e-6) if norm_layer is None else norm_layer
        layers = [Conv2dNormActivation(3, block_setting[0].input_channels, kernel_size=4, stride=4, padding=0,
                                       norm_layer=norm_layer, activation_layer=None, bias=True)]
        total_blocks = sum(config.num_layers for config in block_setting)
        block_id = 0
        for config in block_setting:
            stage = []
            for _ in range(config.num_layers):
                stage.append(block(config.input_channels, layer_scale,
                                   stochastic_depth_prob * block_id / (total_blocks - 1.0)))
                block_id += 1
            layers.append(nn.Sequential(*stage))
            if config.out_channels is not None:
                layers.append(nn.Sequential(norm_layer(config.input_channels),
                                            nn.Conv2d(config.input_channels, config.out_channels, kernel_size=2,
                                                      stride=2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        last = block_setting[-1]
        channels = last.input_channels if last.out_channels is None else last.out_channels
        self.classifier = nn.Sequential(norm_layer(channels), nn.Flatten(1), nn.Linear(channels, num_classes))
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


class ConvNeXt_Tiny_Weights(WeightsEnum):
    IMAGENET1K_V1 = published("convnext_tiny-983f1562.pth", 28589128, resize_size=236)
    DEFAULT = Default("IMAGENET1K_V1")


@register_model(ConvNeXt_Tiny_Weights)
def convnext_tiny(*, weights=None, progress: bool = True, **kwargs) -> ConvNeXt:
    """ConvNeXt-T: stages of 3, 3, 9 and 3 blocks of 96, 192, 384 and 768 channels; stochastic depth 0.1 unless
    ``stochastic_depth_prob`` is given.

    ``weights`` is a path to a checkpoint (torchvision's ``.pth`` or a ``.safetensors``); with one of another
    number of classes, pass ``num_classes``. ``progress`` is accepted for torchvision's signature (nothing is
    downloaded). ``kwargs`` go to :class:`ConvNeXt`.
    """
    block_setting = [CNBlockConfig(96, 192, 3), CNBlockConfig(192, 384, 3), CNBlockConfig(384, 768, 9),
                     CNBlockConfig(768, None, 3)]
    model = ConvNeXt(block_setting, stochastic_depth_prob=kwargs.pop("stochastic_depth_prob", 0.1), **kwargs)
    return load_weights(model, weights, ConvNeXt_Tiny_Weights)
