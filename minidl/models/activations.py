"""The activations transformers' configs name (``hidden_act``, ``activation_function``), those minidl computes: a
config naming another is refused by name rather than run with a different function."""
from __future__ import annotations

from minidl.nn import functional as F

__all__ = ["ACTIVATIONS", "activation"]

ACTIVATIONS = {
    "gelu": F.gelu,   # exact (erf), as transformers' "gelu"
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "quick_gelu": lambda x: x * F.sigmoid(1.702 * x),
    "relu": F.relu, "relu6": F.relu6, "leaky_relu": F.leaky_relu, "hardswish": F.hardswish,
    "silu": F.silu, "swish": F.silu, "mish": F.mish, "tanh": F.tanh, "sigmoid": F.sigmoid,
    "linear": lambda x: x,
}


def activation(name: str, owner: str, field: str):
    """The function ``name`` stands for; ``owner`` and ``field`` name the config's class and field in the error."""
    if name not in ACTIVATIONS:
        raise ValueError(f"{owner}: {field}={name!r} is not supported (minidl computes "
                         f"{', '.join(sorted(ACTIVATIONS))})")
    return ACTIVATIONS[name]
