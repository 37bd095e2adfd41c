"""minidl.nn.modules: torch.nn.modules' submodule layout over minidl.nn's classes (the same objects, not copies).

Scripts name classes by torch's module paths (``nn.modules.linear.Linear`` in ``safe_globals([...])``,
``isinstance(m, nn.modules.batchnorm.BatchNorm2d)``); each submodule here holds the classes torch keeps in the
submodule of that name (``torch.nn.X.__module__``), wherever minidl defines them.
"""
import sys
import types

from .. import activation, batchnorm, container, conv, dropout, linear, loss, module, normalization, pooling
from .. import distance, instancenorm
from .. import rnn, sparse, transformer
from .. import pixelshuffle, upsampling

_LAYOUT = {
    "module": [module.Module],
    "activation": [activation.ELU, activation.GELU, activation.LeakyReLU, activation.LogSigmoid,
                   activation.LogSoftmax, activation.ReLU, activation.Sigmoid, activation.SiLU, activation.Softmax,
                   activation.Softplus, activation.Tanh, transformer.MultiheadAttention, activation.CELU,
                   activation.GLU, activation.SELU, activation.Hardshrink, activation.Hardsigmoid, activation.Hardswish,
                   activation.Hardtanh, activation.Mish, activation.PReLU, activation.ReLU6, activation.RReLU,
                   activation.Softmin, activation.Softshrink, activation.Softsign, activation.Tanhshrink,
                   activation.Threshold],
    "batchnorm": [batchnorm.BatchNorm1d, batchnorm.BatchNorm2d, batchnorm.BatchNorm3d],
    "container": [container.ModuleDict, container.ModuleList, container.Sequential],
    "conv": [conv.Conv1d, conv.Conv2d, conv.ConvTranspose2d, conv.Conv3d, conv.ConvTranspose1d, conv.ConvTranspose3d],
    "dropout": [dropout.Dropout, dropout.Dropout1d, dropout.Dropout2d, dropout.Dropout3d],
    "flatten": [container.Flatten, container.Unflatten],
    "linear": [container.Identity, linear.Linear, linear.NonDynamicallyQuantizableLinear, linear.Bilinear],
    "loss": [loss.BCELoss, loss.BCEWithLogitsLoss, loss.CrossEntropyLoss, loss.HuberLoss, loss.KLDivLoss,
             loss.L1Loss, loss.MSELoss, loss.NLLLoss, loss.SmoothL1Loss]
    + [getattr(loss, name) for name in ("MarginRankingLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss",
                                        "CosineEmbeddingLoss", "HingeEmbeddingLoss", "MultiMarginLoss",
                                        "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "SoftMarginLoss",
                                        "GaussianNLLLoss", "PoissonNLLLoss", "CTCLoss")],
    "normalization": [batchnorm.GroupNorm, normalization.LayerNorm, normalization.RMSNorm,
                      normalization.LocalResponseNorm],
    "instancenorm": [instancenorm.InstanceNorm1d, instancenorm.InstanceNorm2d, instancenorm.InstanceNorm3d],
    "distance": [distance.CosineSimilarity, distance.PairwiseDistance],
    "pooling": [pooling.AdaptiveAvgPool2d, pooling.AvgPool2d, pooling.MaxPool2d, pooling.AdaptiveAvgPool1d,
                pooling.AdaptiveAvgPool3d, pooling.AdaptiveMaxPool1d, pooling.AdaptiveMaxPool2d,
                pooling.AdaptiveMaxPool3d, pooling.AvgPool1d, pooling.AvgPool3d, pooling.LPPool1d, pooling.LPPool2d,
                pooling.LPPool3d, pooling.MaxPool1d, pooling.MaxPool3d, pooling.MaxUnpool1d, pooling.MaxUnpool2d,
                pooling.MaxUnpool3d, pooling.FractionalMaxPool2d, pooling.FractionalMaxPool3d],
    "rnn": [rnn.GRU, rnn.GRUCell, rnn.LSTM, rnn.LSTMCell, rnn.RNN, rnn.RNNBase, rnn.RNNCell, rnn.RNNCellBase],
    "sparse": [sparse.Embedding, sparse.EmbeddingBag],
    "upsampling": [upsampling.Upsample, upsampling.UpsamplingBilinear2d, upsampling.UpsamplingNearest2d],
    "pixelshuffle": [pixelshuffle.PixelShuffle, pixelshuffle.PixelUnshuffle],
    "channelshuffle": [pixelshuffle.ChannelShuffle],
    "transformer": [transformer.Transformer, transformer.TransformerDecoder, transformer.TransformerDecoderLayer,
                    transformer.TransformerEncoder, transformer.TransformerEncoderLayer],
}


def _submodule(name: str, classes: list) -> types.ModuleType:
    """A module ``minidl.nn.modules.<name>`` holding ``classes``, importable by that dotted name."""
    sub = types.ModuleType(f"{__name__}.{name}", f"torch.nn.modules.{name}'s classes, as minidl.nn has them.")
    for cls in classes:
        setattr(sub, cls.__name__, cls)
    sub.__all__ = [cls.__name__ for cls in classes]
    sys.modules[sub.__name__] = sub
    return sub


for _name, _classes in _LAYOUT.items():
    globals()[_name] = _submodule(_name, _classes)
    globals().update({cls.__name__: cls for cls in _classes})  # torch.nn.modules exports every class too
del _name, _classes
