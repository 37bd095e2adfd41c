"""The building blocks torchvision's models share (``torchvision.ops``), with its names and arguments, so that a
model assembled from them has torchvision's state-dict names: a convolution-norm-activation block, squeeze and
excitation, an MLP, a permutation as a module, and stochastic depth."""
from __future__ import annotations

import minidl
from minidl import nn

__all__ = ["Conv2dNormActivation", "MLP", "Permute", "SqueezeExcitation", "StochasticDepth", "stochastic_depth"]


def stochastic_depth(input, p: float, mode: str, training: bool = True):
    """Drop whole residual branches (Huang et al., 2016): each sample's (``mode="row"``) or the batch's
    (``mode="batch"``) ``input`` is zeroed with probability ``p`` and the survivors scaled by 1 / (1 - p), so the
    expected value is unchanged; the identity outside training or when ``p`` is 0."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"stochastic_depth: drop probability has to be between 0 and 1, but got {p}")
    if mode not in ("batch", "row"):
        raise ValueError(f"stochastic_depth: mode has to be either 'batch' or 'row', but got {mode!r}")
    if not training or p == 0.0:
        return input
    survival = 1.0 - p
    shape = [input.shape[0]] + [1] * (input.ndim - 1) if mode == "row" else [1] * input.ndim
    noise = minidl.empty(shape, dtype=input.dtype, device=input.device).bernoulli_(survival)
    if survival > 0.0:
        noise = noise / survival
    return input * noise


class StochasticDepth(nn.Module):
    """:func:`stochastic_depth` as a module: active in training mode only."""

    def __init__(self, p: float, mode: str) -> None:
        super().__init__()
        self.p, self.mode = p, mode

    def forward(self, input):
        return stochastic_depth(input, self.p, self.mode, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, mode={self.mode}"


class Conv2dNormActivation(nn.Sequential):
    """Conv2d, then a norm layer, then an activation (either may be None); "same" padding by default, and a
    convolution bias only when there is no norm layer to absorb it."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size=3, stride=1, padding=None, groups: int = 1,
                 norm_layer=nn.BatchNorm2d, activation_layer=nn.ReLU, dilation=1, inplace=True, bias=None) -> None:
        if padding is None:
            padding = (kernel_size - 1) // 2 * dilation
        if bias is None:
            bias = norm_layer is None
        layers = [nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation=dilation,
                            groups=groups, bias=bias)]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            layers.append(activation_layer(**({} if inplace is None else {"inplace": inplace})))
        super().__init__(*layers)
        self.out_channels = out_channels


class SqueezeExcitation(nn.Module):
    """Squeeze and excitation (Hu et al., 2018): each channel scaled by a gate computed from all channels'
    global averages through a bottleneck of ``squeeze_channels``."""

    def __init__(self, input_channels: int, squeeze_channels: int, activation=nn.ReLU,
                 scale_activation=nn.Sigmoid) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, input):
        scale = self.fc2(self.activation(self.fc1(self.avgpool(input))))
        return self.scale_activation(scale) * input


class MLP(nn.Sequential):
    """Linear layers of widths ``hidden_channels``, each but the last followed by an optional norm, the
    activation and dropout; dropout after the last too."""

    def __init__(self, in_channels: int, hidden_channels: list, norm_layer=None, activation_layer=nn.ReLU,
                 inplace=None, bias: bool = True, dropout: float = 0.0) -> None:
        params = {} if inplace is None else {"inplace": inplace}
        layers, width = [], in_channels
        for hidden in hidden_channels[:-1]:
            layers.append(nn.Linear(width, hidden, bias=bias))
            if norm_layer is not None:
                layers.append(norm_layer(hidden))
            layers += [activation_layer(**params), nn.Dropout(dropout, **params)]
            width = hidden
        layers += [nn.Linear(width, hidden_channels[-1], bias=bias), nn.Dropout(dropout, **params)]
        super().__init__(*layers)


class Permute(nn.Module):
    """``input.permute(dims)`` as a module (ConvNeXt moves channels last for its LayerNorm and Linear layers)."""

    def __init__(self, dims: list) -> None:
        super().__init__()
        self.dims = list(dims)

    def forward(self, input):
        return minidl.permute(input, self.dims)
