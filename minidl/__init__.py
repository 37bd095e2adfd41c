"""minidl: an eager deep-learning framework with a PyTorch-like API, written from scratch.

Layers, each importing only those below (the README's table): ``layout`` (index math) ->
``kernels`` (the primitive contract; ``kernels.cpu`` / ``kernels.cuda`` implement it) ->
``autograd`` -> ``ops`` (each op once, forward and backward, declared in ``ops.registry``) ->
``Tensor`` -> nn, optim, utils, vision, models, amp, cuda -> dist.
"""
from . import autograd, kernels, layout
from .autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from ._device import device, get_default_device, set_default_device
from ._dtype import (bfloat16, bool_ as bool, float16, float32, float64, get_default_dtype, int16, int32, int64,
                    promote_types, set_default_dtype, uint8)
from ._dtype import dtype
from ._type_info import finfo, iinfo
from .layout import Size
from .ops import *  # noqa: F401,F403  (the functional API)
from .ops.autocast_mode import (clear_autocast_cache, get_autocast_dtype, is_autocast_cache_enabled,
                                is_autocast_enabled, set_autocast_cache_enabled, set_autocast_dtype,
                                set_autocast_enabled)
from .ops.random import Generator, default_generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state
from ._tensor import Tensor
from ._layouts import channels_last, channels_last_3d, contiguous_format, preserve_format, sparse_coo, strided
from ._layouts import MemoryFormat as memory_format
from .sparse import sparse_coo_tensor
from ._tensor_base import Storage as UntypedStorage
from .legacy_tensors import (BFloat16Tensor, BoolTensor, ByteTensor, DoubleTensor, FloatTensor, HalfTensor, IntTensor, LongTensor,
                             ShortTensor)
from .serialization import load, save
from ._dlpack import DLDeviceType, from_dlpack
from .threads import get_num_threads, set_num_threads
from . import (accelerator, amp, backends, cuda, library, linalg, multiprocessing, nn, optim,  # noqa: E402
               special, utils)  # (above the Tensor layer)
from . import onnx  # noqa: E402  (its exporter needs the onnx package only when it runs)
from . import compiler  # noqa: E402  (above nn: it compiles modules)
from .compiler import compile  # noqa: E402
from .cuda.streams import Event, Stream  # noqa: E402
from .amp import autocast

half, float, double = float16, float32, float64
short, int, long = int16, int32, int64

__version__ = "0.1.0"


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def zero_(t):
    """``torch.zero_(t)``: the function form of ``t.zero_()``."""
    return t.zero_()


def is_floating_point(t) -> bool:
    return t.is_floating_point()


def numel(t) -> int:
    return t.numel()


def result_type(a, b):
    from ._dtype import result_type as _result_type
    return _result_type(a, b)


def can_cast(from_, to) -> bool:
    return from_.category <= to.category

