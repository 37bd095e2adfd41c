"""A fused program as CUDA C (the GPU's fused kernels).

One thread computes one element of the iteration space at a time (a grid-stride loop): it loads the
operands through their layouts, calls each op's device function of ``formulas.cuh`` (generated from
``table.py``, as the eager kernels' switches are) on values held in registers, each rounded to the
type eager stored it in, and stores the values the graph reads later.
"""
from __future__ import annotations

from . import codegen
from .fused_program import Program

CTYPE = {"float32": "float", "float64": "double", "int64": "long long", "bool": "bool"}


def _expression(op, args) -> str:
    if op.family == "where":
        return f"({args[0]} ? {args[1]} : {args[2]})"
    if op.family == "copy":
        return args[0]
    return f"{op.family}_{op.name}({', '.join(args)})"


def source(program: Program, name: str) -> str:
    """The text of one ``extern "C"`` kernel ``name(loads..., stores..., n)`` computing ``program``."""
    nloads = len(program.loads)
    params = [f"const {CTYPE[ld.dtype]} *L{i}, const Layout L{i}l" for i, ld in enumerate(program.loads)]
    params += [f"{CTYPE[st.dtype]} *S{i}, const Layout S{i}l" for i, st in enumerate(program.stores)]
    lines = [f"// {codegen.HEADER.replace('table.py', 'table.py by fused_cuda.py')} Program {program.key()}.",
             '#include "formulas.cuh"', "",
             f'extern "C" __global__ void {name}({", ".join(params)}, long long n) {{',
             "    GRID_STRIDE_LOOP(i, n) {"]
    for i, ld in enumerate(program.loads):
        lines.append(f"        const {CTYPE[ld.dtype]} v{i} = L{i}[position(L{i}l, i)];")
    for k, op in enumerate(program.ops):
        ctype = CTYPE[op.dtype]
        value = f"({ctype})({_expression(op, [f'v{a}' for a in op.args])})"
        lines.append(f"        const {ctype} v{nloads + k} = {value};")
    for i, st in enumerate(program.stores):
        lines.append(f"        S{i}[position(S{i}l, i)] = v{st.value};")
    lines += ["    }", "}"]
    return "\n".join(lines) + "\n"
