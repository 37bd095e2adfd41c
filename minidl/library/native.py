"""Kernels on buffers for user ops: a C function from a shared library, a CUDA source, or Python.

They take their arguments as minidl's own primitives do (``minidl/kernels/__init__.py``): raw buffers and
layouts, never Tensors. One convention for all three, in the op's schema order:

- each Tensor argument: its buffer (the whole flat storage: element 0 of the buffer, not of the tensor) and
  its layout (shape, strides in elements, offset); a Tensor? that is None: a null buffer and an empty layout;
- each float, int (SymInt) or bool argument: its value (C: double, int64_t, bool);
- then each output: buffer and layout of a tensor the op's fake made (the kernel writes it);
- last ``n``: the element count of the first output (of the first mutated argument when the op returns
  nothing), the loop bound of an elementwise kernel.

A C or CUDA kernel is written for one element type: it is picked by the dtype of the call's buffers, which
must all have one (a mismatch is refused rather than misread).

A layout reaches C and CUDA as the ``Layout`` struct of minidl's CUDA kernels (``csrc/common.cuh``; for C,
``minidl_kernel.h`` beside this file, ``minidl.library.include_dir()``), passed by value; element i of a tensor
(row-major) is at ``buffer[position(layout, i)]``. A C kernel returns an int: 0, or an error code the op
raises. A CUDA kernel is compiled by the runtime minidl's own kernels use (NVRTC through CuPy, or the
simulator's g++), with ``common.cuh`` in front, and launched as a 1-D grid-stride loop over ``n``.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from .._dtype import to_dtype
from ..kernels.cuda import runtime

SCALARS = {"float": ctypes.c_double, "SymInt": ctypes.c_int64, "int": ctypes.c_int64, "bool": ctypes.c_bool}
NUMPY_SCALARS = {"float": np.float64, "SymInt": np.int64, "int": np.int64, "bool": np.bool_}


def include_dir() -> str:
    """The folder of ``minidl_kernel.h`` (the Layout struct and ``minidl_position`` for C kernels)."""
    return os.path.dirname(os.path.abspath(__file__))


class BufferKernel:
    """A kernel on buffers, registered with ``register_kernel`` as a Python function would be."""
    device_types = None   # the device types it runs on (None: any)

    def bind(self, op, device_type) -> None:
        """Check that it can be ``op``'s kernel on ``device_type`` (raising, naming the op, if not)."""
        if self.device_types is not None and device_type not in self.device_types:
            raise ValueError(f"{op._qualname}: a {type(self).__name__} runs on {', '.join(self.device_types)}, "
                             f"not on {device_type or 'every device'}")
        for a in op._schema.arguments:
            if not (a.type in ("Tensor", "Tensor?") or a.type in SCALARS):
                raise ValueError(f"{op._qualname}: a kernel on buffers takes Tensor, Tensor?, float, int and bool "
                                 f"arguments; argument {a.name!r} is {a.type}")
        for r in op._schema.returns:
            if r != "Tensor":
                raise ValueError(f"{op._qualname}: a kernel on buffers writes Tensor outputs; the op returns {r}")

    def launcher(self, op, device_type):
        """The primitive registered under the op's name: ``launch(operands)``, operands as the docstring says."""
        raise NotImplementedError


class PythonKernel(BufferKernel):
    def __init__(self, fn):
        self.fn = fn

    def launcher(self, op, device_type):
        def launch(operands):
            self.fn(*operands)
        return launch


def buffer_kernel(fn) -> BufferKernel:
    """``fn(*operands)``, a Python function on buffers and layouts, as a kernel on buffers."""
    return PythonKernel(fn)


def _by_dtype(names, what: str) -> dict:
    """{numpy dtype of the buffers, or None for any: kernel name} from a name or a {dtype: name} dict."""
    if isinstance(names, str):
        return {None: names}
    if not isinstance(names, dict) or not names:
        raise TypeError(f"{what}: give a kernel name, or a dict {{dtype: name}}, got {names!r}")
    return {np.dtype(to_dtype(d).np): n for d, n in names.items()}


def _pick(op, chosen: dict, operands, kinds, what: str):
    """The kernel name for the dtype of the call's buffers, which must all have one (a C or CUDA kernel reads
    them as the one element type it was written for)."""
    dtypes = {o.dtype for o, kind in zip(operands, kinds) if kind == "buffer" and o is not None}
    if len(dtypes) > 1:
        raise TypeError(f"{op._qualname}: its {what} kernel takes tensors of one dtype, got "
                        f"{', '.join(sorted(str(d) for d in dtypes))}")
    dtype = dtypes.pop() if dtypes else None
    found = chosen.get(None, chosen.get(dtype))
    if found is None:
        raise TypeError(f"{op._qualname}: its {what} has no kernel for dtype {dtype} (it has "
                        f"{', '.join(str(d) for d in chosen)})")
    return found


class _CLayout(ctypes.Structure):
    _fields_ = [("ndim", ctypes.c_int64), ("offset", ctypes.c_int64), ("shape", ctypes.c_int64 * runtime.MAX_DIMS),
                ("strides", ctypes.c_int64 * runtime.MAX_DIMS)]


_EMPTY = _CLayout()


def _layout(layout, op):
    """A Layout as the kernels' struct (packed as the CUDA kernels' one: a 0-d tensor is one element of 1-d)."""
    if len(layout.shape) > runtime.MAX_DIMS:
        raise ValueError(f"{op}: a kernel on buffers takes tensors of at most {runtime.MAX_DIMS} dims, got shape "
                         f"{tuple(layout.shape)}")
    return runtime.layout_arg(layout.shape, layout.strides, layout.offset, op)


class CKernel(BufferKernel):
    """A C function of a shared library (loaded with ctypes), per dtype if given a dict."""
    device_types = ("cpu",)

    def __init__(self, path, symbol):
        self.path = os.fspath(path)
        self.chosen = _by_dtype(symbol, f"c_kernel({self.path!r})")
        self.functions = {}

    def bind(self, op, device_type):
        super().bind(op, device_type)
        try:
            library = ctypes.CDLL(os.path.abspath(self.path))
        except OSError as e:
            raise OSError(f"{op._qualname}: cannot load the shared library {self.path}: {e}") from None
        argtypes = []
        for a in op._schema.arguments:
            argtypes += [ctypes.c_void_p, _CLayout] if a.type.startswith("Tensor") else [SCALARS[a.type]]
        argtypes += [ctypes.c_void_p, _CLayout] * len(op._schema.returns) + [ctypes.c_int64]
        for symbol in self.chosen.values():
            try:
                function = getattr(library, symbol)
            except AttributeError:
                raise AttributeError(f"{op._qualname}: the shared library {self.path} has no symbol {symbol!r} "
                                     f"(is it declared extern \"C\" and exported?)") from None
            function.argtypes, function.restype = argtypes, ctypes.c_int
            self.functions[symbol] = function

    def launcher(self, op, device_type):
        qualname, kinds = op._qualname, _kinds(op)

        def launch(operands):
            function = self.functions[_pick(op, self.chosen, operands, kinds, "C library")]
            code = function(*(_c_argument(o, kind, qualname) for o, kind in zip(operands, kinds)))
            if code != 0:
                raise RuntimeError(f"{qualname}: its C kernel {function.__name__} in {self.path} returned error "
                                   f"code {code}")
        return launch


class CudaKernel(BufferKernel):
    """A ``extern "C" __global__`` kernel of a CUDA source string, per dtype if given a dict, compiled at its
    first launch by minidl's CUDA runtime."""
    device_types = ("cuda",)

    def __init__(self, source: str, name):
        self.source = source
        self.chosen = _by_dtype(name, "cuda_kernel")

    def launcher(self, op, device_type):
        qualname, kinds = op._qualname, _kinds(op)

        def launch(operands):
            name = _pick(op, self.chosen, operands, kinds, "CUDA source")
            try:
                kernel = runtime.compile_text(self.source)(name)
            except Exception as e:   # (NVRTC's, CuPy's and the simulator's errors differ)
                raise RuntimeError(f"{qualname}: its CUDA kernel {name!r} did not compile or is not in the "
                                   f"source: {e}") from e
            args = [_cuda_argument(o, kind, qualname) for o, kind in zip(operands, kinds)]
            runtime.launch(kernel, operands[-1], *args)
        return launch


def _kinds(op) -> list:
    """What each operand is: 'buffer', 'layout', or a scalar's schema type."""
    kinds = []
    for a in op._schema.arguments:
        kinds += ["buffer", "layout"] if a.type.startswith("Tensor") else [a.type]
    return kinds + ["buffer", "layout"] * len(op._schema.returns) + ["SymInt"]


def _c_argument(value, kind, qualname):
    if kind == "buffer":
        return None if value is None else value.ctypes.data
    if kind == "layout":
        return _EMPTY if value is None else _CLayout.from_buffer_copy(_layout(value, qualname).tobytes())
    return value


def _cuda_argument(value, kind, qualname):
    if kind == "buffer":
        return runtime.NULL if value is None else value
    if kind == "layout":
        return runtime.layout_arg((), (), 0, qualname) if value is None else _layout(value, qualname)
    return NUMPY_SCALARS[kind](value)


def c_kernel(path, symbol) -> CKernel:
    """The C function ``symbol`` of the shared library at ``path`` as a kernel on buffers for "cpu";
    ``symbol`` may be a dict {dtype: symbol} to pick by the first tensor's dtype."""
    return CKernel(path, symbol)


def cuda_kernel(source: str, name) -> CudaKernel:
    """The kernel ``name`` of a CUDA source string as a kernel on buffers for "cuda"; ``name`` may be a dict
    {dtype: name} to pick by the first tensor's dtype."""
    return CudaKernel(source, name)
