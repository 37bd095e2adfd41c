"""Fusion: consecutive elementwise launches of a captured graph become one generated kernel.

A chain such as a bias add, then GELU, reads and writes every intermediate through memory, once per
op; fused, each element is loaded once, carried through the chain in registers and stored once, and
only the values something else reads are stored at all. The pass, once per captured graph:

1. walks the steps in order and grows a *group* of consecutive elementwise launches (unary, binary,
   compare, where, and copies between equal or floating dtypes) over one shape. A step joins only when
   computing the group element by element gives what the launches gave one after another: a buffer the
   group writes is read and written in it through one element mapping only (no element of it is
   written by one op and read as another element by a later one);
2. turns each group of two or more into a ``Program`` (``formulas/fused_program.py``): loads, the ops
   on numbered values, and stores. A value is stored unless its buffer is the graph's own and nothing
   but this group's steps refers to it (the value then never exists in memory);
3. asks the device's ``fused`` kernel for a launch (generated from the formulas, compiled, cached on
   disk) and puts it in place of the group's steps. A kernel that fails to compile leaves the group's
   steps as they were, with a warning naming its ops.
"""
from __future__ import annotations

import collections
import math
import warnings

from .. import kernels
from ..formulas import table
from ..formulas.fused_numba import vectorised
from ..formulas.fused_program import Load, Op, Program, Reduction, Store
from ..layout import Layout, collapse
from .memory import address, buffers, held_elsewhere
from .recorder import STEP_KINDS

_COMPUTE = {"float32", "float64", "int64"}
_FLOATS = {"float32", "float64"}
_PARSERS = ("unary", "binary", "compare", "where", "copy")
# launches that may raise on the values they read: moved or fused, the writes made before the raise would differ
_RAISING = {"check_index", "take", "put", "cross_entropy", "cross_entropy_backward"}
_FORMULAS = {family: {f.name: f for f in members} for family, members in table.FAMILIES.items()}


class Access:
    """One operand: a buffer read or written through a layout, and the element mapping that is."""

    def __init__(self, buf, layout):
        self.buf, self.layout = buf, layout
        self.root = _root_id(buf)
        start = address(buf) + layout.offset * buf.itemsize   # (the address of element 0)
        self.mapping = (self.root, start, tuple(s * buf.itemsize for s in layout.strides), buf.dtype.str)

    @property
    def dtype(self) -> str:
        return self.buf.dtype.name


def _parse_reduce(args):
    """(op, the access reduced, dims, out) of a reduce step."""
    op, x, xl, dims, out = args
    return op, Access(x, xl), tuple(dims), out


def _parse(kind, args):
    """(family, op name, reads, write) of an elementwise step the generators can write, else None."""
    if kind == "unary":
        op, x, xl, out, ol = args
        reads, name = [(x, xl)], op
    elif kind in ("binary", "compare"):
        op, a, al, b, bl, out, ol = args
        reads, name = [(a, al), (b, bl)], op
    elif kind == "where":
        c, cl, a, al, b, bl, out, ol = args
        reads, name = [(c, cl), (a, al), (b, bl)], "where"
    elif kind == "copy":
        x, xl, out, ol = args
        reads, name = [(x, xl)], "copy"
    else:
        return None
    if ol.numel == 0 or any(layout.shape != ol.shape for _, layout in reads):
        return None
    reads = [Access(b, l) for b, l in reads]
    write = Access(out, ol)
    if not _types_fit(kind, name, [r.dtype for r in reads], write.dtype):
        return None
    return kind, name, reads, write


def _types_fit(family, name, ins, out) -> bool:
    """Whether the generators compute this op in these dtypes exactly as eager's kernels do."""
    if family == "copy":
        return ins[0] == out or (ins[0] in _FLOATS and out in _FLOATS)
    if family == "where":
        return ins[0] == "bool" and ins[1] == ins[2] == out and out in _COMPUTE
    f = _FORMULAS[family][name]
    if ins[0] not in _COMPUTE or any(t != ins[0] for t in ins) or out != ("bool" if family == "compare" else ins[0]):
        return False
    return not (f.float_only and ins[0] not in _FLOATS) and not (f.int_only and ins[0] in _FLOATS)


def _eager_path(family, reads, write) -> str:
    """How eager's CPU kernel computed the step (``kernels/cpu/elementwise.py``): a packed run, a run with a
    broadcast y (binary only), or element by element. Where the vectorised functions differ from the
    formula in the last bit (exp, float32 GELU), the fused kernel must take the same path."""
    if family not in ("unary", "binary"):
        return "element"
    layouts = [r.layout for r in reads] + [write.layout]
    if family == "unary" and layouts[0].is_contiguous and layouts[1].is_contiguous:
        return "run"
    _, strides = collapse(write.layout.shape, *(l.strides for l in layouts))
    last = tuple(s[-1] for s in strides)
    if family == "binary":
        flat = [1 if l.is_contiguous else 0 if not any(l.strides) else None for l in layouts[:2]]
        if None not in flat and layouts[2].is_contiguous:
            last = (*flat, 1)
        return "run" if last == (1, 1, 1) else "scalar" if last == (1, 0, 1) else "element"
    return "run" if last == (1, 1) else "element"


class _Group:
    def __init__(self, device, parsed, at):
        self.device = device
        self.shape = parsed[3].layout.shape
        self.steps, self.members, self.passed = [], [], []   # passed: steps moved ahead of the group
        self.touched = collections.defaultdict(set)   # root -> element mappings it is accessed through
        self.written = set()
        self.accesses = []
        self.reduction = None    # once a reduction joined: (op, the access it reduces, its out buffer)
        self.epilogue = []       # then: the elementwise steps on its results, over eshape
        self.eshape = None
        self.etouched = collections.defaultdict(set)
        self.ewritten = set()
        self.add(parsed, at)

    def accepts(self, device, parsed) -> bool:
        _, _, reads, write = parsed
        if device != self.device:
            return False
        if self.reduction is not None:
            return self._accepts_epilogue(parsed)
        if write.layout.shape != self.shape or self.touched.get(write.root, {write.mapping}) != {write.mapping}:
            return False
        return all(r.root not in self.written or self.touched[r.root] == {r.mapping} for r in reads)

    def add(self, parsed, at):
        self.members.append(at)
        if self.reduction is not None:
            self.epilogue.append(parsed)
            self.eshape = parsed[3].layout.shape
            for access in (*parsed[2], parsed[3]):
                self.etouched[access.root].add(access.mapping)
            self.ewritten.add(parsed[3].root)
            return
        self.steps.append(parsed)
        self.accesses += (*parsed[2], parsed[3])
        for access in (*parsed[2], parsed[3]):
            self.touched[access.root].add(access.mapping)
        self.written.add(parsed[3].root)

    def accepts_reduction(self, device, reduction) -> bool:
        """A reduction of a value the group wrote, as eager's kernel reduces a packed row per result (the
        reduced dims last, its input contiguous)."""
        op, x, dims, out = reduction
        if device != self.device or self.reduction is not None or not x.layout.is_contiguous:
            return False
        if x.layout.shape != self.shape and len(dims) == x.layout.ndim:   # (all of it, through another shape)
            x, dims = self._whole(x), tuple(range(len(self.shape)))
        if x is None or x.layout.shape != self.shape or x.root not in self.written or \
                self.touched[x.root] != {x.mapping}:
            return False
        ndim = len(self.shape)
        first = ndim - len(dims)
        if not dims or tuple(dims) != tuple(range(first, ndim)) or math.prod(self.shape[first:]) < 2:
            return False
        return x.dtype in _COMPUTE and out.dtype.name == x.dtype and _root_id(out) not in self.touched

    def _whole(self, x):
        """``x``, a contiguous view of all of a value the group wrote packed, as the group wrote it (or None)."""
        for _, _, _, write in self.steps:
            if write.root == x.root and write.layout.is_contiguous and write.mapping[1] == x.mapping[1] and \
                    write.dtype == x.dtype:
                return write
        return None

    def add_reduction(self, reduction, at):
        op, x, dims, out = reduction
        if x.layout.shape != self.shape:
            x, dims = self._whole(x), tuple(range(len(self.shape)))
        self.members.append(at)
        self.reduction = (op, x, dims, out)

    def _accepts_epilogue(self, parsed) -> bool:
        family, name, reads, write = parsed
        _, x, dims, out = self.reduction
        if write.layout.shape != (self.eshape or write.layout.shape) or write.layout.numel != out.size:
            return False
        if self.device == "cpu" and vectorised(Op(family, name, (), write.dtype, _eager_path(family, reads, write))):
            return False   # (eager computed it with a vectorised function, which an epilogue does not call)
        for access in (*reads, write):
            if access.root == _root_id(out):   # the results, read as eager's next launch read them
                if access is write or not access.layout.is_contiguous or access.mapping[1] != address(out):
                    return False
            elif access.root in self.touched:
                return False
            elif (access is write or access.root in self.ewritten) and \
                    self.etouched.get(access.root, {access.mapping}) != {access.mapping}:
                return False
        return True

    def independent(self, args) -> bool:
        """Whether a launch over ``args`` touches no buffer of the group (so it may run before it)."""
        roots = {_root_id(b) for _, b in buffers(args)}
        return not (roots & (self.touched.keys() | self.etouched.keys() | self.all_written()))

    def all_written(self) -> set:
        written = self.written | self.ewritten
        if self.reduction is not None:
            written.add(_root_id(self.reduction[3]))
        return written


def fuse(steps, kinds, writes, owned, reborn=None):
    """The graph's (steps, kinds, writes) with each fusable group in one step; ``owned``: ids of the root
    buffers the capture allocated; ``reborn``: id of a buffer the capture handed out again -> the argument
    containers of the steps where it starts anew (``Recorder.reborn``). Returns the new lists and the
    programs made.

    A kernel launch that touches none of a growing group's buffers does not end the group: it moves ahead of
    it, which changes nothing it computes. Elementwise launches move so only when they make one element (a
    constant copied in); any other may start a group of its own."""
    # (first: the groups below hold references to buffers too)
    users, held = _users(steps), held_elsewhere(steps, writes, reborn)
    groups, current = [], None

    def close():
        if current is not None and len(current.members) > 1:
            groups.append(current)
    for i, ((fn, args), kind) in enumerate(zip(steps, kinds)):
        raises = _may_raise(kind, fn, args)
        parsed = _parse(kind, args) if kind in _PARSERS and not raises else None
        device = kernels.device_of(kind, fn) if parsed or kind == "reduce" else None
        if current is not None and parsed is not None and current.accepts(device, parsed):
            current.add(parsed, i)
        elif kind == "reduce" and current is not None and current.accepts_reduction(device, _parse_reduce(args)):
            current.add_reduction(_parse_reduce(args), i)
        elif current is not None and kind not in STEP_KINDS and not raises and current.independent(args) and \
                (parsed is None or parsed[3].layout.numel == 1):   # (an elementwise launch: a constant only)
            current.passed.append(i)
        else:
            close()
            current = _Group(device, parsed, i) if parsed is not None and device is not None else None
    close()
    if not groups:
        return steps, kinds, writes, []
    replaced = {}   # position of a group's last member -> (its fused step, the steps moved ahead of it)
    dropped = set()
    programs = []
    for group in groups:
        members = set(group.members)
        internal = {root for root in group.all_written()
                    if root in owned and root not in held and _dead_after(root, members, users, steps, reborn or {})}
        made = _launch(group, internal)
        if made is None:
            continue
        programs.append(made[0])
        passed = [p for p in group.passed if p < group.members[-1]]
        replaced[group.members[-1]] = (made, passed)
        dropped.update(members, passed)
    out = ([], [], [])
    for i in range(len(steps)):
        if i in replaced:
            (program, launch, buffers), passed = replaced[i]
            for p in passed:
                _append(out, steps[p], kinds[p], writes[p])
            _append(out, (launch, buffers), "fused", tuple(range(len(program.loads), len(buffers))))
        elif i not in dropped:
            _append(out, steps[i], kinds[i], writes[i])
    return (*out, programs)


def _dead_after(root, members, users, steps, reborn) -> bool:
    """Whether no step but the group's reads what the group leaves in ``root``: no other step uses it, or the
    first to use it after the group is one where the capture handed it out anew (and none uses it before)."""
    others = sorted(users[root] - members)
    if not others:
        return True
    if others[0] < max(members):
        return False
    return id(steps[others[0]][1]) in {id(args) for args in reborn.get(root, ())}


def _append(lists, step, kind, written):
    for into, item in zip(lists, (step, kind, written)):
        into.append(item)


def _launch(group, internal):
    """(program, launch, its buffers) for a group, or None where its kernel does not compile."""
    prologue = _Numbering(group.steps)
    result, epilogue = None, _Numbering([])
    if group.reduction is not None:
        op, x, dims, out = group.reduction
        result = Access(out, Layout(group.eshape or (out.size,)))
        epilogue = _Numbering(group.epilogue, result_root=result.root)
    nloads, nops = len(prologue.loads), len(prologue.ops)

    def number(v):   # values: the loads, the ops, the result, the epilogue's loads, its ops
        kind, i = v
        return {"load": i, "op": nloads + i, "result": nloads + nops, "eload": nloads + nops + 1 + i,
                "eop": nloads + nops + 1 + len(epilogue.loads) + i}[kind]
    stores = [(number(v), w) for v, w in prologue.finals() if w.root not in internal]
    accesses = [*prologue.loads, *(w for _, w in stores)]
    if group.reduction is None:
        shape, strides = collapse(group.shape, *(a.layout.strides for a in accesses))
        reduction, eshape, eaccesses, estrides = None, None, [], []
    else:
        first = len(group.shape) - len(dims)
        kept, kstrides = collapse(group.shape[:first], *(a.layout.strides[:first] for a in accesses))
        reduced, rstrides = collapse(group.shape[first:], *(a.layout.strides[first:] for a in accesses))
        shape, strides = (*kept, *reduced), [(*k, *r) for k, r in zip(kstrides, rstrides)]
        finals = epilogue.finals()
        if result.root not in internal:
            finals.append((("result", 0), result))
        estores = [(number(v), w) for v, w in finals if w.root not in internal]
        eaccesses = [*epilogue.loads, *(w for _, w in estores)]
        eshape, estrides = collapse(result.layout.shape, *(a.layout.strides for a in eaccesses))
        reduction = Reduction(op, number(prologue.value_of[x.mapping]), out.dtype.name,
                              "int64" if out.dtype.name == "int64" else "float64", len(kept),
                              tuple(Load(a.dtype, "n") for a in epilogue.loads), epilogue.program_ops(number),
                              tuple(Store(v, w.dtype, "n") for v, w in estores))
    classes = ["1" if s[-1] == 1 else "0" if s[-1] == 0 else "n" for s in strides]
    program = Program(len(shape), tuple(Load(a.dtype, c) for a, c in zip(prologue.loads, classes)),
                      prologue.program_ops(number),
                      tuple(Store(v, w.dtype, c) for (v, w), c in zip(stores, classes[nloads:])), reduction)
    operands = [(a.buf, a.layout.offset, st) for a, st in zip(accesses, strides)]
    operands += [(a.buf, a.layout.offset, st) for a, st in zip(eaccesses, estrides)]
    try:
        launch = kernels.lookup("fused", group.device)(program, shape, operands, eshape)
    except Exception as e:   # (any failure of the generated kernel: the steps stay as they were)
        warnings.warn(f"minidl.compile: the fused kernel of {program} ({len(group.members)} launches) did not "
                      f"compile, so these launches run one by one: {type(e).__name__}: {e}", RuntimeWarning,
                      stacklevel=2)
        return None
    return program, launch, [a for a, _, _ in operands]


class _Numbering:
    """The values of a run of elementwise steps: what each op reads (an earlier op's value, or a load,
    shared by every op that reads that element mapping) and the last value written to each mapping."""

    def __init__(self, steps, result_root=None):
        """``result_root``: an epilogue's, whose reads of that buffer are the reduction's results."""
        self.loads, self.ops, self.load_of, self.value_of, self.final = [], [], {}, {}, {}
        self.result_root = result_root
        load, op = ("load", "op") if result_root is None else ("eload", "eop")
        for family, name, reads, write in steps:
            args = [self._value(r, load) for r in reads]
            self.ops.append((family, name, args, _eager_path(family, reads, write), write))
            self.value_of[write.mapping] = self.final[write.mapping] = (op, len(self.ops) - 1)

    def _value(self, access, kind):
        if access.root == self.result_root:
            return ("result", 0)
        found = self.value_of.get(access.mapping)
        if found is None:
            found = self.load_of.get(access.mapping)
            if found is None:
                found = self.load_of[access.mapping] = (kind, len(self.loads))
                self.loads.append(access)
        return found

    def finals(self) -> list:
        """(value, the access it is stored through) of each mapping's last write."""
        return [(v, self.ops[v[1]][4]) for v in self.final.values()]

    def program_ops(self, number) -> tuple:
        return tuple(Op(family, name, tuple(number(a) for a in args), write.dtype, path)
                     for family, name, args, path, write in self.ops)


def _may_raise(kind, fn, args) -> bool:
    """Whether a launch may raise on the values it reads (an index out of range, an integer divided by zero
    on the CPU). Such a launch neither joins a group nor moves ahead of one: when it raises, the launches
    before it have written everything and those after it nothing, as in the eager call."""
    if kind in _RAISING:
        return True
    return (kind == "binary" and args[0] in ("floordiv", "remainder") and args[1].dtype.kind in "iu"
            and kernels.device_of(kind, fn) == "cpu")   # (CUDA's give 0)


def _root_id(buf) -> int:
    """The identity of what owns ``buf``'s memory (numpy and CuPy views keep it as ``base``)."""
    while getattr(buf, "base", None) is not None:
        buf = buf.base
    return id(buf)


def _users(steps) -> dict:
    """id(root buffer) -> the positions of the steps that refer to it (directly or through a view)."""
    users = collections.defaultdict(set)
    for i, (_, args) in enumerate(steps):
        for _, buf in buffers(args):
            users[_root_id(buf)].add(i)
    return users
