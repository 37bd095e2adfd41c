"""A fused program as Numba source (the CPU's fused kernels).

The iteration space is walked as the CPU's elementwise kernels walk it: a loop per outer dim, and the
innermost dim in tiles of ``TILE`` elements. Within a tile the ops run in *segments*:

- an element segment is one loop over the tile in which each op's formula (from ``table.py``, written
  out by ``numba_source.expression``) reads the values before it as local variables, rounded to the
  dtype eager stored them in, so a fused chain computes exactly what the chain of launches did;
- a vector segment is one op that eager computed with a vectorised function of its own (``RUNS``, and
  ``FLOAT32_RUNS`` on float32 runs), called here on the tile as eager called it on its run.

A value that crosses segments lives in a tile-sized scratch array (in cache); every other value lives
in a register. Only the values the graph reads later are stored.
"""
from __future__ import annotations

from . import codegen, table
from .fused_program import Program
from .numba_source import FLOAT32_RUNS, RUNS, expression

TILE = 512
CAST = {"float32": "np.float32", "float64": "np.float64", "int64": "np.int64", "bool": "bool"}
_FAMILY = {"unary": table.UNARY, "binary": table.BINARY, "compare": table.COMPARE}


def formula(op):
    return next(f for f in _FAMILY[op.family] if f.name == op.name)


def vectorised(op) -> bool:
    """Whether eager computed ``op`` with a vectorised function (and the fused kernel must too)."""
    return op.path == "run" and (op.name in RUNS or (op.name in FLOAT32_RUNS and op.dtype == "float32"))


def _segments(program: Program) -> list:
    """Consecutive op numbers, grouped: an element segment, or a vectorised op alone."""
    segments = []
    for k, op in enumerate(program.ops):
        if vectorised(op) or not segments or vectorised(program.ops[segments[-1][-1]]):
            segments.append([k])
        else:
            segments[-1].append(k)
    return segments


class _Writer:
    def __init__(self, program: Program, name: str):
        self.p, self.name = program, name
        self.nloads = len(program.loads)
        self.lines = []
        self.segments = _segments(program)
        self.segment_of = {len(program.loads) + k: s for s, seg in enumerate(self.segments) for k in seg}
        # values kept in a tile: used by a later segment, or made or read by a vectorised op
        self.tiled = set()
        for s, seg in enumerate(self.segments):
            for k in seg:
                op, value = program.ops[k], self.nloads + k
                if vectorised(op):
                    self.tiled.add(value)
                    self.tiled.update(a for a in op.args if a >= self.nloads or program.loads[a].stride != "1")
                else:
                    self.tiled.update(a for a in op.args if a >= self.nloads and self.segment_of[a] != s)

    def dtype(self, value) -> str:
        return self.p.loads[value].dtype if value < self.nloads else self.p.ops[value - self.nloads].dtype

    def reduced(self, value) -> bool:
        return self.p.reduction is not None and self.p.reduction.value == value

    def emit(self, depth, text):
        self.lines.append("    " * depth + text)

    def source(self) -> str:
        p = self.p
        params = ["shape"] + [f"L{i}, L{i}o, L{i}s" for i in range(self.nloads)] + \
                 [f"S{i}, S{i}o, S{i}s" for i in range(len(p.stores))]
        r = p.reduction
        if r is not None:
            params += ["init, ishape, istrides, eshape"] + [f"E{i}, E{i}o, E{i}s" for i in range(len(r.loads))] + \
                      [f"F{i}, F{i}o, F{i}s" for i in range(len(r.stores))]
        self.emit(0, "@njit(cache=True, nogil=True)")
        self.emit(0, f"def {self.name}({', '.join(params)}):")
        self.emit(1, f'"""{p}"""')
        last = p.ndim - 1
        self.emit(1, f"inner = shape[{last}]")
        for kind, count, strides in (("L", self.nloads, [ld.stride for ld in p.loads]),
                                     ("S", len(p.stores), [st.stride for st in p.stores])):
            for i in range(count):
                if strides[i] == "n":
                    self.emit(1, f"{kind}{i}t = {kind}{i}s[{last}]")
        for v in sorted(self.tiled):
            self.emit(1, f"t{v} = np.empty({TILE}, {CAST[self.dtype(v)]})")
        if r is not None:   # (a result's values, reduced by eager's own function: the same order of operations)
            size = " * ".join(f"shape[{d}]" for d in range(r.kept, p.ndim))
            self.emit(1, f"red = np.empty({size}, {CAST[self.dtype(r.value)]})")
            self.emit(1, "o = 0")
        depth = 1
        operands = [f"L{i}" for i in range(self.nloads)] + [f"S{i}" for i in range(len(p.stores))]
        for d in range(last):   # a loop per outer dim, each operand's position carried along
            if r is not None and d == r.kept:
                self.emit(depth, "r = 0")
            self.emit(depth, f"for i{d} in range(shape[{d}]):")
            depth += 1
            for o in operands:
                before = f"{o}o" if d == 0 else f"p{o}_{d - 1}"
                self.emit(depth, f"p{o}_{d} = {before} + i{d} * {o}s[{d}]")
        for o in operands:
            self.emit(depth, f"p{o} = {o}o" if last == 0 else f"p{o} = p{o}_{last - 1}")
        if r is not None and r.kept == last:
            self.emit(depth, "r = 0")
        for i, ld in enumerate(p.loads):
            if ld.stride == "0":
                self.emit(depth, f"b{i} = L{i}[pL{i}]")
        self.emit(depth, f"for lo in range(0, inner, {TILE}):")
        depth += 1
        self.emit(depth, f"m = min(inner - lo, {TILE})")
        for seg in self.segments:
            if vectorised(p.ops[seg[0]]):
                self._vector_segment(depth, seg[0])
            else:
                self._element_segment(depth, seg)
        if r is not None:
            self.emit(depth - 1, "r += inner")
            self._epilogue(1 + r.kept)
        return "\n".join(self.lines) + "\n"

    def _epilogue(self, depth):
        """After a result's rows: reduce them, then the epilogue on the result ``o`` (row-major over ``eshape``)."""
        r, result = self.p.reduction, self.p.result
        self.emit(depth, f"acc = _reduce_one(REDUCE_{r.op.upper()}, red, 0, ishape, istrides, init)")
        self.emit(depth, f"v{result} = {CAST[r.dtype]}(acc)")
        for i in range(len(r.loads)):
            self.emit(depth, f"v{result + 1 + i} = E{i}[flat_position(o, eshape, E{i}s, E{i}o)]")
        for k, op in enumerate(r.ops):
            self.emit(depth, f"v{result + 1 + len(r.loads) + k} = {CAST[op.dtype]}({self._expression(op)})")
        for i, st in enumerate(r.stores):
            self.emit(depth, f"F{i}[flat_position(o, eshape, F{i}s, F{i}o)] = v{st.value}")
        self.emit(depth, "o += 1")

    # -- reading and writing operands -------------------------------------------------------------
    def _load(self, i) -> str:
        """Load i's element j of the tile (a packed load through its tile's slice, ``_slices``)."""
        stride = self.p.loads[i].stride
        return f"b{i}" if stride == "0" else f"a{i}[j]" if stride == "1" else f"L{i}[pL{i} + (lo + j) * L{i}t]"

    def _store(self, depth, i, value_text):
        stride = self.p.stores[i].stride
        where = "j" if stride == "1" else f"pS{i}" if stride == "0" else f"pS{i} + (lo + j) * S{i}t"
        self.emit(depth, f"{'o' if stride == '1' else 'S'}{i}[{where}] = {value_text}")

    def _slices(self, depth, loads, stores):
        """The tile of each packed operand as a slice: indexed from 0 by the loop's own counter, its accesses
        need no negative-index check, and LLVM vectorises the loop."""
        for i in sorted(loads):
            if self.p.loads[i].stride == "1":
                self.emit(depth, f"a{i} = L{i}[pL{i} + lo:pL{i} + lo + m]")
        for i in sorted(stores):
            if self.p.stores[i].stride == "1":
                self.emit(depth, f"o{i} = S{i}[pS{i} + lo:pS{i} + lo + m]")

    def _array(self, value) -> str:
        """The tile of ``value`` as an array (a packed load is read in place)."""
        if value not in self.tiled:
            return f"L{value}[pL{value} + lo:pL{value} + lo + m]"
        return f"t{value}[:m]"

    def _stores_of(self, value):
        return [i for i, st in enumerate(self.p.stores) if st.value == value]

    # -- segments ---------------------------------------------------------------------------------
    def _element_segment(self, depth, seg):
        p = self.p
        here = self.segment_of[self.nloads + seg[0]]
        self._slices(depth, {a for k in seg for a in p.ops[k].args if a < self.nloads},
                     {i for k in seg for i in self._stores_of(self.nloads + k)})
        self.emit(depth, "for j in range(m):")
        depth += 1
        for a in sorted({a for k in seg for a in p.ops[k].args}):   # loads, and values of earlier segments
            if a < self.nloads:
                self.emit(depth, f"v{a} = {self._load(a)}")
            elif self.segment_of[a] != here:
                self.emit(depth, f"v{a} = t{a}[j]")
        for k in seg:
            op, value = p.ops[k], self.nloads + k
            self.emit(depth, f"v{value} = {CAST[op.dtype]}({self._expression(op)})")
            if value in self.tiled:
                self.emit(depth, f"t{value}[j] = v{value}")
            if self.reduced(value):
                self.emit(depth, f"red[r + lo + j] = v{value}")
            for i in self._stores_of(value):
                self._store(depth, i, f"v{value}")

    def _vector_segment(self, depth, k):
        p = self.p
        op, value = p.ops[k], self.nloads + k
        self._slices(depth, set(), self._stores_of(value))
        for a in op.args:   # strided or broadcast loads a vectorised op reads: gathered first
            if a < self.nloads and a in self.tiled:
                self.emit(depth, "for j in range(m):")
                self.emit(depth + 1, f"t{a}[j] = {self._load(a)}")
        args = [self._array(a) for a in op.args]
        out = f"t{value}[:m]"
        run = RUNS.get(op.name) or FLOAT32_RUNS[op.name]
        if op.name in RUNS:
            self.emit(depth, f"{run}({', '.join(args)}, {out})")
        else:   # (as eager's run switch: the vectorised function, else the formula)
            self.emit(depth, f"if not {run}({', '.join(args)}, {out}):")
            self.emit(depth + 1, "for j in range(m):")
            self.emit(depth + 2, f"t{value}[j] = {expression(formula(op), [f'{a}[j]' for a in args])}")
        stores = self._stores_of(value)
        if stores or self.reduced(value):
            self.emit(depth, "for j in range(m):")
            for i in stores:
                self._store(depth + 1, i, f"t{value}[j]")
            if self.reduced(value):
                self.emit(depth + 1, f"red[r + lo + j] = t{value}[j]")

    def _expression(self, op) -> str:
        args = [f"v{a}" for a in op.args]
        if op.family == "where":
            return f"{args[1]} if {args[0]} else {args[2]}"
        if op.family == "copy":
            return args[0]
        return expression(formula(op), args)


def source(program: Program, name: str) -> str:
    """A module defining the njit function ``name`` that computes ``program``."""
    called = sorted(codegen.function_name(codegen.resolve(n)) for n in codegen.called_names())
    runs = sorted({RUNS.get(op.name) or FLOAT32_RUNS[op.name] for op in program.ops if vectorised(op)})
    lines = [f'"""GENERATED by minidl/formulas/fused_numba.py from the formulas of minidl/formulas/table.py: '
             f'{program}, program {program.key()}."""',
             "import math  # noqa: F401", "", "import numpy as np", "from numba import njit", "",
             "from minidl.kernels.cpu.jit import scalar_math as sm  # noqa: F401",
             f"from minidl.kernels.cpu.jit.formulas import {', '.join(called)}  # noqa: F401"]
    vector = {r: ("vector_math" if r in RUNS.values() else "vector_activations") for r in runs}
    for r, module in sorted(vector.items()):
        lines.append(f"from minidl.kernels.cpu.jit.{module} import {r}")
    if program.reduction is not None:
        lines += ["from minidl.kernels.cpu.jit.reduce import _reduce_one",
                  f"from minidl.kernels.cpu.jit.op_codes import REDUCE_{program.reduction.op.upper()}",
                  "from minidl.kernels.cpu.jit.rows import flat_position"]
    lines += ["", ""]
    return "\n".join(lines) + _Writer(program, name).source()
