"""The CUDA simulator: minidl's CUDA kernel sources compiled by the host C++ compiler and run on
the CPU, so their index math is tested on machines without a GPU (CI included).

A kernel source is compiled once with ``prelude.h`` (the CUDA built-ins) and ``scheduler.cpp``
(the launch: one fiber per GPU thread) into a shared library, cached on disk by the hash of its
text. For each ``extern "C" __global__`` kernel a wrapper is generated that unpacks an argument
array the way ``cuLaunchKernel`` does (one pointer to each argument's value), so the Python side
passes arguments exactly as it would to a real launch. Buffers are numpy arrays.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)')
_lock = threading.Lock()  # the scheduler's state is global: one launch at a time


def cache_dir() -> str:
    path = os.environ.get("MINIDL_CUDA_SIM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "minidl", "cuda-sim")
    os.makedirs(path, exist_ok=True)
    return path


def kernel_signatures(source: str) -> dict:
    """name -> parameter types of every ``extern "C" __global__`` kernel, after the preprocessor."""
    expanded = subprocess.run(["g++", "-E", "-P", "-x", "c++", "-"], input=source, capture_output=True,
                              text=True, check=True).stdout
    kernels = {}
    for name, params in _KERNEL.findall(expanded):
        types = []
        for param in filter(None, (p.strip() for p in params.split(","))):
            words = re.match(r"(.*?)(\w+)$", param)
            types.append(words.group(1).strip())
        kernels[name] = types
    return kernels


def _wrappers(kernels: dict) -> str:
    """Per kernel: the launch wrapper, and a description of each parameter for the checks in
    ``_check_argument`` (bytes; kind 0 integer, 1 floating, 2 pointer, 3 struct; for a pointer,
    the bytes and kind of what it points at)."""
    lines = ["#include <type_traits>",
             "template <class T> constexpr long long minidl_kind() { return std::is_floating_point<T>::value ? 1 :",
             "    std::is_pointer<T>::value ? 2 : std::is_class<T>::value ? 3 : 0; }",
             "template <class T> constexpr long long minidl_pointee() { using P = typename std::remove_cv<",
             "    typename std::remove_pointer<T>::type>::type; return std::is_pointer<T>::value ?",
             "    (long long)sizeof(P) * 4 + minidl_kind<P>() : 0; }"]
    for name, types in kernels.items():
        args = ", ".join(f"*({t} *)a[{i}]" for i, t in enumerate(types))
        lines.append(f'extern "C" void minidl_sim__{name}(void **a) {{ {name}({args}); }}')
        described = " ".join(f"d[{3 * i}] = sizeof({t}); d[{3 * i + 1}] = minidl_kind<{t}>(); "
                             f"d[{3 * i + 2}] = minidl_pointee<{t}>();" for i, t in enumerate(types))
        lines.append(f'extern "C" void minidl_params__{name}(long long *d) {{ {described} }}')
    return "\n".join(lines)


class SimModule:
    """One compiled kernel source; ``function(name)`` gives a launcher."""

    def __init__(self, source: str):
        self.kernels = kernel_signatures(source)
        with open(os.path.join(HERE, "prelude.h")) as f:
            prelude = f.read()
        with open(os.path.join(HERE, "scheduler.cpp")) as f:
            scheduler = f.read()
        unit = "\n".join((prelude, source, scheduler, _wrappers(self.kernels)))
        digest = hashlib.sha256(unit.encode()).hexdigest()[:24]
        library = os.path.join(cache_dir(), f"kernels-{digest}.so")
        if not os.path.exists(library):
            _compile(unit, library)
        self.lib = ctypes.CDLL(library)
        self.lib.minidl_sim_launch.restype = ctypes.c_int

    def function(self, name: str):
        if name not in self.kernels:
            raise AttributeError(f"cuda sim: no kernel named {name!r} in this module")
        return SimFunction(self.lib, name, len(self.kernels[name]))


def _compile(unit: str, library: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "unit.cpp")
        with open(src, "w") as f:
            f.write(unit)
        partial = os.path.join(tmp, "unit.so")
        done = subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-w", "-o", partial, src],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"cuda sim: g++ failed to compile a kernel source:\n{done.stderr[-4000:]}")
        os.replace(partial, library)  # atomic: concurrent processes never load half a library


class SimFunction:
    """Launches one kernel: ``f(grid, block, args, shared_mem=0)``, as a cupy.RawKernel is called."""

    def __init__(self, lib, name, nargs):
        self.lib, self.name, self.nargs = lib, name, nargs
        self.wrapper = ctypes.cast(getattr(lib, f"minidl_sim__{name}"), ctypes.c_void_p)
        described = (ctypes.c_longlong * max(3 * nargs, 1))()
        getattr(lib, f"minidl_params__{name}")(described)
        self.params = [tuple(described[3 * i:3 * i + 3]) for i in range(nargs)]

    def __call__(self, grid, block, args, shared_mem=0):
        if len(args) != self.nargs:
            raise TypeError(f"cuda sim: kernel {self.name} takes {self.nargs} arguments, got {len(args)}")
        grid, block = _dim3(grid), _dim3(block)
        for i, (a, param) in enumerate(zip(args, self.params)):
            _check_argument(self.name, i, a, *param)
        keep = [_argument(a) for a in args]  # the values the pointers point at stay alive
        pointers = (ctypes.c_void_p * max(len(keep), 1))(*(ctypes.addressof(k) for k in keep))
        error = ctypes.create_string_buffer(256)
        with _lock:
            failed = self.lib.minidl_sim_launch(self.wrapper, *grid, *block, ctypes.c_ulonglong(shared_mem),
                                                pointers, error, len(error))
        if failed:
            raise RuntimeError(f"cuda sim: kernel {self.name} deadlocked: {error.value.decode()}")


def _dim3(v):
    v = tuple(int(x) for x in (v if isinstance(v, tuple) else (v,)))
    return v + (1,) * (3 - len(v))


_KINDS = {"i": 0, "u": 0, "b": 0, "f": 1, "V": 3}
_NAMES = ("an integer", "a floating-point value", "a pointer", "a struct")


def _check_argument(kernel, i, a, size, kind, pointee):
    """What a GPU would silently misread: a scalar of the wrong width or kind (np.int32 for a long
    long, a float for an int), a buffer of the wrong element type, a value for a pointer."""
    where = f"cuda sim: kernel {kernel}, argument {i}"
    if kind == 2:
        if isinstance(a, np.uint64) and a == 0:  # runtime.NULL
            return
        if not (isinstance(a, np.ndarray) and a.dtype.names is None):
            raise TypeError(f"{where}: expects a pointer (a device buffer), got {type(a).__name__}")
        size, kind = pointee // 4, pointee % 4  # a struct (float16's bits) fits any dtype of its size
        if pointee and (a.itemsize != size or (kind != 3 and _KINDS.get(a.dtype.kind, 3) != kind)):
            raise TypeError(f"{where}: expects a buffer of {_NAMES[kind]} of {size} bytes, got {a.dtype}")
        return
    got = a.dtype
    if got.itemsize != size or _KINDS.get(got.kind, 3) != kind:
        raise TypeError(f"{where}: expects {_NAMES[kind]} of {size} bytes, got {got} ({got.itemsize} bytes)")


def _argument(a):
    """A ctypes object holding the argument's value: a buffer's data pointer, or the bytes of a
    scalar or of a structured (struct-by-value) numpy value."""
    if isinstance(a, np.ndarray) and a.dtype.names is None:
        return ctypes.c_void_p(a.ctypes.data)
    if isinstance(a, (np.ndarray, np.generic)):
        raw = np.ascontiguousarray(a).tobytes()
        return ctypes.create_string_buffer(raw, len(raw))
    raise TypeError(f"cuda sim: kernel arguments must be arrays or numpy scalars, got {type(a).__name__}")
