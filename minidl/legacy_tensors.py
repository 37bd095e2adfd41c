"""PyTorch's legacy typed tensor classes: ``FloatTensor([1, 2])``, ``LongTensor(3)``, and
``isinstance(x, FloatTensor)`` for a CPU float32 tensor. Each is a constructor with a fixed dtype
(``Tensor`` itself follows the default dtype), not a subclass: what it makes is a plain Tensor."""
from . import _dtype as dt
from ._tensor import Tensor
from .ops.creation import legacy_new


class _LegacyTensorType(type):
    def __call__(cls, *args, device=None):
        return legacy_new(cls.dtype, device, args, cls.__name__)

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype and obj.device.type == "cpu"


def _legacy(name, dtype):
    return _LegacyTensorType(name, (), {"dtype": dtype, "__doc__": f"A CPU {dtype.name} tensor (legacy constructor)."})


FloatTensor = _legacy("FloatTensor", dt.float32)
DoubleTensor = _legacy("DoubleTensor", dt.float64)
HalfTensor = _legacy("HalfTensor", dt.float16)
LongTensor = _legacy("LongTensor", dt.int64)
IntTensor = _legacy("IntTensor", dt.int32)
ShortTensor = _legacy("ShortTensor", dt.int16)
ByteTensor = _legacy("ByteTensor", dt.uint8)
BoolTensor = _legacy("BoolTensor", dt.bool_)
