"""The fused primitive on the CPU: a program's generated Numba source (``formulas/fused_numba.py``),
written to the compile cache, imported, and compiled for the operands' types before any replay runs it
(so a kernel that does not compile is known while the graph is built, not halfway through a step)."""
import importlib.util
import sys

import numba
import numpy as np

from ... import kernels
from ...formulas import fused_numba
from .. import fused_cache

_modules: dict = {}


def _function(program):
    """The njit function of ``program`` (its module imported once per process)."""
    name = f"fused_{program.key()}"
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
def fused(program, shape, operands):
    fn = _function(program)
    shape = np.array(shape, dtype=np.int64)
    fixed = [(int(offset), np.array(strides, dtype=np.int64)) for _, offset, strides in operands]
    example = [shape]
    for (buf, _, _), (offset, strides) in zip(operands, fixed):
        example += (buf, offset, strides)
    fn.compile(tuple(numba.typeof(a) for a in example))

    def launch(*buffers):
        args = [shape]
        for buf, (offset, strides) in zip(buffers, fixed):
            args += (buf, offset, strides)
        fn(*args)
    return launch
