"""minidl.nn: modules, parameters, initialisers and losses, with PyTorch's API.

Built only on the public Tensor API (``nn`` sits above ``Tensor``).
"""
from . import functional, init, utils
from .activation import ELU, GELU, LeakyReLU, LogSigmoid, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Softplus, Tanh
from .container import Flatten, Identity, ModuleDict, ModuleList, Sequential, Unflatten
from .dropout import Dropout
from .linear import Linear
from .loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss, MSELoss, NLLLoss,
                   SmoothL1Loss)
from .module import Module
from .normalization import LayerNorm
from .parameter import Parameter
from .sparse import Embedding

__all__ = [
    "functional", "init", "utils", "Module", "Parameter", "Sequential", "ModuleList", "ModuleDict", "Identity",
    "Flatten", "Unflatten", "Linear", "Embedding", "Dropout", "LayerNorm", "ReLU", "GELU", "SiLU", "Tanh",
    "Sigmoid", "LogSigmoid", "LeakyReLU", "ELU", "Softplus", "Softmax", "LogSoftmax", "CrossEntropyLoss",
    "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss", "BCEWithLogitsLoss", "KLDivLoss",
]
