"""The fused primitive on the CPU: a program's generated Numba source (``formulas/fused_numba.py``),
written to the compile cache, imported, and compiled for the operands' types before any replay runs it
(so a kernel that does not compile is known while the graph is built, not halfway through a step)."""
import importlib.util
import math
import sys

import numba
import numpy as np

from ... import kernels
from ...formulas import fused_numba
from .. import fused_cache
from . import kernel_cache
from .strided import i64

_modules: dict = {}


def _function(program):
    """The njit function of ``program`` (its module imported once per process)."""
    # (the kernels it calls are inlined into its machine code, which Numba caches by this file alone: their
    # sources' hash in its name makes an edit there compile it afresh)
    name = f"fused_{program.key()}_{kernel_cache.sources_digest(kernel_cache.HERE)[:8]}"
    found = _modules.get(name)
    if found is None:
        path = fused_cache.keep("cpu", f"{name}.py", fused_numba.source(program, name))
        spec = importlib.util.spec_from_file_location(f"minidl_fused_cpu.{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module   # (Numba's cache finds a function's module by name)
        spec.loader.exec_module(module)
        found = _modules[name] = getattr(module, name)
    return found


@kernels.register("fused")
def fused(program, shape, operands, eshape=None):
    fn = _function(program)
    fixed = [(int(offset), i64(strides)) for _, offset, strides in operands]
    prologue = len(program.loads) + len(program.stores)
    between = []   # (a reduction's: its start value, the reduced row's shape and strides, the results' shape)
    if program.reduction is not None:
        init = 0 if program.reduction.op == "sum" else 1
        rows = math.prod(shape[program.reduction.kept:])   # (eager reduces each result's elements as one run)
        reduced = program.ops[program.reduction.value - len(program.loads)].dtype
        between = [getattr(np, program.reduction.init)(init), i64([rows]), i64([1]), i64(eshape),
                   np.empty(rows, reduced)]   # (a result's values, gathered: the graph's, as its other buffers)
    shape = i64(shape)

    def arguments(buffers):
        args = [shape]
        for i, (buf, (offset, strides)) in enumerate(zip(buffers, fixed)):
            if i == prologue:
                args += between
            args += (buf, offset, strides)
        if prologue == len(buffers):
            args += between
        return args
    fn.compile(tuple(numba.typeof(a) for a in arguments([buf for buf, _, _ in operands])))

    def launch(*buffers):
        fn(*arguments(buffers))
    launch.device_type = "cpu"
    return launch
