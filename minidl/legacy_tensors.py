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
BFloat16Tensor = _legacy("BFloat16Tensor", dt.bfloat16)
LongTensor = _legacy("LongTensor", dt.int64)
IntTensor = _legacy("IntTensor", dt.int32)
ShortTensor = _legacy("ShortTensor", dt.int16)
ByteTensor = _legacy("ByteTensor", dt.uint8)
BoolTensor = _legacy("BoolTensor", dt.bool_)

_BY_NAME = {cls.__name__: cls for cls in (FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor, IntTensor,
                                          ShortTensor, ByteTensor, BoolTensor)}
_NAME_OF = {cls.dtype: name for name, cls in _BY_NAME.items()}


def legacy_type_name(dtype, device) -> str:
    """``Tensor.type()``'s answer: 'minidl.FloatTensor', 'minidl.cuda.LongTensor', 'minidl.meta.FloatTensor', ..."""
    return f"minidl.{'' if device.type == 'cpu' else device.type + '.'}{_NAME_OF[dtype]}"


def legacy_type_dtype(kind):
    """The dtype a legacy class or its name (with a 'minidl.' or 'torch.' prefix) stands for."""
    if isinstance(kind, type):
        if kind not in _BY_NAME.values():
            raise TypeError(f"type(): expected a dtype or a legacy tensor type, got {kind.__name__}")
        return kind.dtype
    name = kind.rsplit(".", 1)[-1]
    if name not in _BY_NAME:
        raise ValueError(f"type(): invalid type: {kind!r}")
    return _BY_NAME[name].dtype
