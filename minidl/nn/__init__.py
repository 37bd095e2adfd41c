"""minidl.nn: modules, parameters, initialisers and losses, with PyTorch's API.

Built only on the public Tensor API (``nn`` sits above ``Tensor``).
"""
from . import functional, init, parallel, utils
from .activation import ELU, GELU, LeakyReLU, LogSigmoid, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Softplus, Tanh
from .activation import (CELU, GLU, SELU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, Mish, PReLU, ReLU6, RReLU,
                         Softmin, Softshrink, Softsign, Tanhshrink, Threshold)
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm
from .distance import CosineSimilarity, PairwiseDistance
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .container import Flatten, Identity, ModuleDict, ModuleList, Sequential, Unflatten
from .conv import Conv1d, Conv2d, ConvTranspose2d
from .conv import Conv3d, ConvTranspose1d, ConvTranspose3d
from .dropout import Dropout, Dropout1d, Dropout2d, Dropout3d
from .linear import Bilinear, Linear
from .loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss, MSELoss, NLLLoss,
                   SmoothL1Loss)
from .loss import (CosineEmbeddingLoss, CTCLoss, GaussianNLLLoss, HingeEmbeddingLoss, MarginRankingLoss,
                   MultiLabelMarginLoss, MultiLabelSoftMarginLoss, MultiMarginLoss, PoissonNLLLoss, SoftMarginLoss,
                   TripletMarginLoss, TripletMarginWithDistanceLoss)
from .module import Module
from .normalization import LayerNorm, LocalResponseNorm, RMSNorm
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d,
                      AvgPool1d, AvgPool3d, LPPool1d, LPPool2d, LPPool3d, MaxPool1d, MaxPool3d, MaxUnpool1d,
                      MaxUnpool2d, MaxUnpool3d, FractionalMaxPool2d, FractionalMaxPool3d)
from .parameter import Parameter
from .pixelshuffle import ChannelShuffle, PixelShuffle, PixelUnshuffle
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .sparse import Embedding, EmbeddingBag
from .transformer import MultiheadAttention, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder
from .transformer import Transformer, TransformerEncoderLayer
from .upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d
from . import modules  # torch's submodule layout over the classes above

__all__ = [
    "functional", "init", "parallel", "utils", "Module", "Parameter", "Sequential", "ModuleList", "ModuleDict", "Identity",
    "Flatten", "Unflatten", "Linear", "Embedding", "Dropout", "LayerNorm", "ReLU", "GELU", "SiLU", "Tanh",
    "Sigmoid", "LogSigmoid", "LeakyReLU", "ELU", "Softplus", "Softmax", "LogSoftmax", "CrossEntropyLoss",
    "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss", "BCEWithLogitsLoss", "KLDivLoss",
    "Conv1d", "Conv2d", "ConvTranspose2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "BatchNorm1d",
    "BatchNorm2d", "GroupNorm", "Dropout1d", "Dropout2d", "Dropout3d",
    "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
]
__all__ += ["MultiheadAttention", "Transformer", "TransformerEncoderLayer", "TransformerEncoder",
            "TransformerDecoderLayer", "TransformerDecoder", "modules", "RMSNorm", "BatchNorm3d"]
__all__ += ["Hardtanh", "ReLU6", "Hardswish", "Hardsigmoid", "Mish", "SELU", "CELU", "GLU", "PReLU", "Softsign",
            "Threshold", "Softmin", "Hardshrink", "Softshrink", "Tanhshrink", "RReLU"]
__all__ += ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LocalResponseNorm", "EmbeddingBag",
            "CosineSimilarity", "PairwiseDistance", "Bilinear"]
__all__ += ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle",
            "ChannelShuffle"]
__all__ += ["MarginRankingLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss", "CosineEmbeddingLoss",
            "HingeEmbeddingLoss", "MultiMarginLoss", "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss",
            "SoftMarginLoss", "GaussianNLLLoss", "PoissonNLLLoss", "CTCLoss"]
__all__ += ["Conv3d", "ConvTranspose1d", "ConvTranspose3d", "MaxPool1d", "MaxPool3d", "AvgPool1d", "AvgPool3d",
            "AdaptiveAvgPool1d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
            "LPPool1d", "LPPool2d", "LPPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "FractionalMaxPool2d",
            "FractionalMaxPool3d"]
