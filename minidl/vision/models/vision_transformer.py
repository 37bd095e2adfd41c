"""The Vision Transformer (Dosovitskiy et al., 2020, https://arxiv.org/abs/2010.11929) as torchvision builds it:
its classes, arguments, state-dict names and initialisation, so that torchvision's checkpoints load unchanged.

An image is cut into ``patch_size`` squares, each projected to ``hidden_dim`` features by one strided convolution
(or a convolutional stem, Xiao et al., 2021, with ``conv_stem_configs``); a learnt class token is prepended, the
sequence passes through a pre-norm Transformer encoder, and the class token's features are classified.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from functools import partial
from typing import Callable, NamedTuple, Optional

import minidl
from minidl import nn

from ..ops import MLP, Conv2dNormActivation
from ._api import Default, Weights, WeightsEnum, imagenet_preset, load_weights, register_model

__all__ = ["VisionTransformer", "ViT_B_16_Weights", "vit_b_16"]


def _check(condition: bool, message: str) -> None:
    """torchvision's ``torch._assert``: an AssertionError with its message, so callers catch the same error."""
    if not condition:
        raise AssertionError(message)


class ConvStemConfig(NamedTuple):
    """One convolution-norm-activation layer of a convolutional stem (replacing the patch projection)."""
    out_channels: int
    kernel_size: int
    stride: int
    norm_layer: Callable[..., nn.Module] = nn.BatchNorm2d
    activation_layer: Callable[..., nn.Module] = nn.ReLU


class MLPBlock(MLP):
    """The encoder's feed-forward block: Linear, GELU, dropout, Linear, dropout (state-dict names ``0`` and
    ``3``); Xavier-uniform weights and near-zero biases, as torchvision initialises it."""

    def __init__(self, in_dim: int, mlp_dim: int, dropout: float):
        super().__init__(in_dim, [mlp_dim, in_dim], activation_layer=nn.GELU, inplace=None, dropout=dropout)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.normal_(m.bias, std=1e-6)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # checkpoints from before torchvision 0.13 (its published ViT weights among them) name the two layers
        # linear_1 and linear_2
        for i in range(2):
            for kind in ("weight", "bias"):
                legacy = f"{prefix}linear_{i + 1}.{kind}"
                if legacy in state_dict:
                    state_dict[f"{prefix}{3 * i}.{kind}"] = state_dict.pop(legacy)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


class EncoderBlock(nn.Module):
    """A pre-norm Transformer layer: x + Dropout(Attention(LN(x))), then that + MLP(LN(that))."""

    def __init__(self, num_heads: int, hidden_dim: int, mlp_dim: int, dropout: float, attention_dropout: float,
                 norm_layer: Callable[..., nn.Module] = partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.num_heads = num_heads
        self.ln_1 = norm_layer(hidden_dim)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout,
                                                    batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = norm_layer(hidden_dim)
        self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

    def forward(self, input):
        _check(input.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}")
        x = self.ln_1(input)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x) + input
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    """Learnt position embeddings (BERT's N(0, 0.02) initialisation), ``num_layers`` encoder blocks named
    ``encoder_layer_<i>``, and a final norm."""

    def __init__(self, seq_length: int, num_layers: int, num_heads: int, hidden_dim: int, mlp_dim: int,
                 dropout: float, attention_dropout: float,
                 norm_layer: Callable[..., nn.Module] = partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.pos_embedding = nn.Parameter(minidl.empty(1, seq_length, hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                                                norm_layer))
            for i in range(num_layers)))
        self.ln = norm_layer(hidden_dim)

    def forward(self, input):
        _check(input.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}")
        return self.ln(self.layers(self.dropout(input + self.pos_embedding)))


class VisionTransformer(nn.Module):
    """ViT for square ``image_size`` images only (the position embeddings fix the number of patches).

    ``representation_size`` inserts a Linear + Tanh "pre-logits" layer before the classifier ``heads.head``,
    which starts at zero, as torchvision initialises it.
    """

    def __init__(self, image_size: int, patch_size: int, num_layers: int, num_heads: int, hidden_dim: int,
                 mlp_dim: int, dropout: float = 0.0, attention_dropout: float = 0.0, num_classes: int = 1000,
                 representation_size: Optional[int] = None,
                 norm_layer: Callable[..., nn.Module] = partial(nn.LayerNorm, eps=1e-6),
                 conv_stem_configs: Optional[list] = None):
        super().__init__()
        _check(image_size % patch_size == 0, "Input shape indivisible by patch size!")
        self.image_size, self.patch_size = image_size, patch_size
        self.hidden_dim, self.mlp_dim = hidden_dim, mlp_dim
        self.attention_dropout, self.dropout = attention_dropout, dropout
        self.num_classes, self.representation_size = num_classes, representation_size
        self.norm_layer = norm_layer
        self.conv_proj = (nn.Conv2d(3, hidden_dim, kernel_size=patch_size, stride=patch_size)
                          if conv_stem_configs is None else _conv_stem(conv_stem_configs, hidden_dim))
        self.class_token = nn.Parameter(minidl.zeros(1, 1, hidden_dim))
        self.seq_length = (image_size // patch_size) ** 2 + 1
        self.encoder = Encoder(self.seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout,
                               attention_dropout, norm_layer)
        heads = OrderedDict()
        if representation_size is not None:
            heads["pre_logits"] = nn.Linear(hidden_dim, representation_size)
            heads["act"] = nn.Tanh()
        heads["head"] = nn.Linear(hidden_dim if representation_size is None else representation_size, num_classes)
        self.heads = nn.Sequential(heads)
        self._init_weights()

    def _init_weights(self) -> None:
        """torchvision's: a LeCun-scaled truncated normal patch projection (or a He-scaled last stem
        convolution), likewise pre-logits, and a zero classifier."""
        if isinstance(self.conv_proj, nn.Conv2d):
            fan_in = self.conv_proj.in_channels * self.conv_proj.kernel_size[0] * self.conv_proj.kernel_size[1]
            nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
            nn.init.zeros_(self.conv_proj.bias)
        else:
            last = self.conv_proj.conv_last
            nn.init.normal_(last.weight, mean=0.0, std=math.sqrt(2.0 / last.out_channels))
            nn.init.zeros_(last.bias)
        if self.representation_size is not None:
            nn.init.trunc_normal_(self.heads.pre_logits.weight, std=math.sqrt(1 / self.heads.pre_logits.in_features))
            nn.init.zeros_(self.heads.pre_logits.bias)
        nn.init.zeros_(self.heads.head.weight)
        nn.init.zeros_(self.heads.head.bias)

    def _process_input(self, x):
        """(n, 3, h, w) images -> (n, patches, hidden_dim) patch embeddings, row-major over the patch grid."""
        n, _, h, w = x.shape
        _check(h == self.image_size, f"Wrong image height! Expected {self.image_size} but got {h}!")
        _check(w == self.image_size, f"Wrong image width! Expected {self.image_size} but got {w}!")
        patches = (h // self.patch_size) * (w // self.patch_size)
        return self.conv_proj(x).reshape(n, self.hidden_dim, patches).permute(0, 2, 1)

    def forward(self, x):
        x = self._process_input(x)
        x = minidl.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        return self.heads(self.encoder(x)[:, 0])


def _conv_stem(configs: list, hidden_dim: int) -> nn.Sequential:
    """The convolutional stem: ``conv_bn_relu_<i>`` per config, then a 1x1 ``conv_last`` to ``hidden_dim``."""
    stem, channels = nn.Sequential(), 3
    for i, config in enumerate(configs):
        stem.add_module(f"conv_bn_relu_{i}", Conv2dNormActivation(
            channels, config.out_channels, kernel_size=config.kernel_size, stride=config.stride,
            norm_layer=config.norm_layer, activation_layer=config.activation_layer))
        channels = config.out_channels
    stem.add_module("conv_last", nn.Conv2d(channels, hidden_dim, kernel_size=1))
    return stem


def _vit_weights(file: str, num_params: int, size: int, resize_size: int, interpolation: str) -> Weights:
    """A weight set torchvision publishes at download.pytorch.org/models/``file``, for ``size`` x ``size`` images
    (``meta["min_size"]``, the ``image_size`` to build the model with)."""
    return Weights(url="https://download.pytorch.org/models/" + file,
                   transforms=imagenet_preset(size, resize_size, interpolation),
                   meta={"num_params": num_params, "min_size": (size, size)})


class ViT_B_16_Weights(WeightsEnum):
    """torchvision's weight sets for :func:`vit_b_16`. IMAGENET1K_SWAG_E2E_V1 was trained on 384 x 384 images:
    build the model for it with ``vit_b_16(weights=path, image_size=384)``."""
    IMAGENET1K_V1 = _vit_weights("vit_b_16-c867db91.pth", 86567656, 224, 256, "bilinear")
    IMAGENET1K_SWAG_E2E_V1 = _vit_weights("vit_b_16_swag-9ac1b537.pth", 86859496, 384, 384, "bicubic")
    IMAGENET1K_SWAG_LINEAR_V1 = _vit_weights("vit_b_16_lc_swag-4e70ced5.pth", 86567656, 224, 224, "bicubic")
    DEFAULT = Default("IMAGENET1K_V1")


@register_model(ViT_B_16_Weights)
def vit_b_16(*, weights=None, progress: bool = True, **kwargs) -> VisionTransformer:
    """ViT-B/16: 12 layers of 12 heads, 768 features, MLP 3072, 16 x 16 patches of 224 x 224 images.

    ``weights`` is a path to a checkpoint (torchvision's ``.pth`` or a ``.safetensors``). torchvision takes
    ``image_size`` and ``num_classes`` from a named weight set; with a file, pass them: ``image_size=384`` for
    IMAGENET1K_SWAG_E2E_V1's. ``progress`` is accepted for torchvision's signature (nothing is downloaded).
    ``kwargs`` go to :class:`VisionTransformer`.
    """
    model = VisionTransformer(image_size=kwargs.pop("image_size", 224), patch_size=16, num_layers=12, num_heads=12,
                              hidden_dim=768, mlp_dim=3072, **kwargs)
    return load_weights(model, weights, ViT_B_16_Weights)
