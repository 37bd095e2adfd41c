"""Capture: run a call eagerly once and record, launch by launch, the kernels it ran.

Every op ends in primitive kernels (``minidl.kernels``), and while a recorder is active on a thread
``kernels.get`` hands out the kernels through ``Recorder.launch``: the forward, the backward the tape
runs (``loss.backward()`` inside the call runs its nodes on this thread, so their kernels are recorded
like the forward's) and the optimizer's update all become steps ``(kernel, arguments)`` over the
buffers they used. Nothing is recorded at the op level: a replay calls the kernels alone.

What a list of launches cannot hold is handled here too:

- buffers: a buffer allocated during the capture is the graph's own, and replays reuse it; on the CPU an
  alloc hands out again a buffer the capture made whose value is spent (``Recorder._alloc``), so that the
  capture holds about what the eager call holds; ``memory.py`` then plans the graph's buffers;
- constants copied from the host (``from_host``) are copied again at every replay, from a device copy
  taken at capture time, so a buffer the graph also writes starts each replay as it started the capture
  (on the CPU the buffer is the host array itself: it is restored at the replay's start once written);
- random draws: a generator's (seed, offset) claims are noted, and each replay draws from where the
  generator stands then (``DRAWS`` names the arguments), advancing it as the eager call would;
- a value read on the host (``.item()``, ``bool(t)``, ``.tolist()``) becomes a check in the replay:
  the same bytes or the replay stops and the call is captured again. That is safe only while the call
  has changed nothing it cannot redo; a read after such a change is a graph break;
- Python state: every ``.grad`` assignment (the backward, ``zero_grad``, user code), ``train()``/``eval()``
  and ``requires_grad_`` become steps that set them again; an optimizer's or a scheduler's step,
  ``clip_grad_norm_`` and ``GradScaler.unscale_`` run as host steps (their Python, reading step counts
  and learning rates afresh); an op's check of its arguments' values (embedding's index range) runs
  again without being a guard; state a library makes lazily and keeps (``made_once``) is made once;
- modules run, and what the call found of them, for the guards (``guards.GraphGuards``).

Whatever else the call does that a replay would not redo is a graph break (``graph_break``).
"""
from __future__ import annotations

import collections
import inspect
import os
import sys
import threading

import numpy as np

from .. import Tensor, kernels, no_grad
from ..kernels.cpu.memory import numpy_view
from ..layout import Layout
from ..ops.core import buf

GRAPH_BREAK_KERNELS = {
    "nonzero": "nonzero: its output's size depends on the tensor's values (nonzero, masked_select, boolean masks)",
    "share_memory": "share_memory_: the tensor's memory moves to shared memory",
    "open_shared": "a tensor is opened from another process's shared memory",
}
# the steps that are no kernel launch: a value check, a host step, a gradient set
STEP_KINDS = {"read": "a value read on the host, checked", "host": "a host step (its Python runs again)",
              "grad": "a tensor's .grad set", "check": "an op's check of its arguments' values, run again",
              "restore": "a CPU tensor made from host data, restored to its values",
              "mode": "a module's training mode set (train(), eval())",
              "requires_grad": "a tensor's requires_grad set"}
REUSE_MIN = 1024   # elements: smaller buffers the capture never hands out again (see Recorder._alloc)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_signatures: dict = {}


class GraphBreakError(RuntimeError):
    """Raised with ``fullgraph=True`` where a call cannot be captured whole."""


class ReadChanged(Exception):
    """A replay read a different value on the host than the capture did."""


def user_line() -> str:
    """'file:line' of the innermost frame outside minidl: where the user's code did it."""
    frame = inspect.currentframe()
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE + os.sep):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<minidl>"


def root(buf):
    """The buffer that owns ``buf``'s memory (numpy and cupy views keep it as ``base``)."""
    while getattr(buf, "base", None) is not None:
        buf = buf.base
    return buf


def _positional(fn, args, kwargs):
    """(args as a list in signature order, {argument name: position})."""
    sig = _signatures.get(fn)
    if sig is None:
        sig = _signatures[fn] = inspect.signature(fn)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return list(bound.args), {name: i for i, name in enumerate(bound.arguments)}


def _run_into(run, result):
    """A host step whose tensor result later launches read: run it, and copy what it returns into the
    tensor it returned when captured."""
    with no_grad():
        result.copy_(run())


def _set_requires_grad(t, value):
    t._requires_grad = value


def _references(holder, key) -> int:
    """sys.getrefcount of ``holder[key]``, read here."""
    return sys.getrefcount(holder[key])


_LONE = _references({0: object()}, 0)   # (what an object only ``holder`` refers to counts here)


def _check_read(to_host, buf, expected: bytes, where: str):
    if np.asarray(to_host(buf)).tobytes() != expected:
        raise ReadChanged(f"a value read on the host at {where} changed")


def _check_view(buf, layout, expected: bytes, where: str):
    if numpy_view(buf, layout).tobytes() != expected:
        raise ReadChanged(f"a value read on the host at {where} changed")


class Recorder:
    def __init__(self, fullgraph: bool):
        self.thread = threading.get_ident()
        self.fullgraph = fullgraph
        self.steps = []          # (callable, args): the replay, in order
        self.kinds = []          # what each step is: a primitive's name, or one of STEP_KINDS
        self.writes = []         # per step, the positions of the arguments it writes (the memory plan's)
        self.draws = []          # (args list, seed position, offset position, generator, offset - start)
        self.claims = {}         # generator -> [seed, first offset, end offset] of its draws in the call
        self.own = {}            # id(root buffer) -> buffer, for the buffers made during the capture
        self.host_arrays = {}    # id(root) -> (buffer, its values): CPU tensors made from host data, until written
        self.wrote_state = False  # did the call change what it cannot redo (parameters, grads, state)?
        self.reads = 0
        self.entry_grads = []    # (leaf, its .grad when the call began): guards
        self.grads_set = set()   # ids of leaves whose .grad the call set
        self.leaves = {}         # id -> each leaf (not made by the call) the backward added a gradient into
        self.held = collections.Counter()   # id(buffer) -> references the recorder holds to it (see holding)
        self.views = {}          # id -> each view of a buffer the steps hold
        self.view_uses = collections.Counter()   # id of a view -> the places in steps that hold it
        self.views_of = collections.defaultdict(list)   # id of a buffer -> ids of its views in self.views
        self.spare = collections.defaultdict(list)   # (numel, dtype) -> ids of the CPU buffers alloc made
        self.unspared = set()    # ids of those alloc may not hand out again (see _alloc)
        self.named = set()       # ids of the root buffers a step named
        self.handed = set()      # ids of the buffers _alloc handed out again that no step has named since
        self.reborn = collections.defaultdict(list)   # id -> the argument containers of the steps that named
                                                      # it first after _alloc handed it out again (see reborn_in)
        self.modules = {}        # id -> module run during the call
        self.entry_modes = {}    # id -> (module, its training mode when the call first ran or set it)
        self.entry_requires_grad = {}   # id -> (tensor, its requires_grad before the call first set it)
        self.backward_ran = False
        self.broken = None       # (reason, 'file:line') of the first graph break
        self.depth = 0           # > 0 inside a kernel or a host step: launches there are not steps
        self.done = False        # the capture ended (a kernel kept from it launches plainly)

    # -- kernels -------------------------------------------------------------------------------
    def kernel(self, name, device_type, fn):
        def launch(*args, **kwargs):
            if self.depth or self.broken or self.done:
                return fn(*args, **kwargs)
            return self.launch(name, device_type, fn, args, kwargs)
        return launch

    def launch(self, name, device_type, fn, args, kwargs):
        if name in GRAPH_BREAK_KERNELS:
            self.graph_break(GRAPH_BREAK_KERNELS[name])
            return fn(*args, **kwargs)
        if name == "alloc":
            return self._owned(self._alloc(device_type, fn, args, kwargs))
        if name == "from_host":
            return self._from_host(device_type, fn, args[0] if args else kwargs["array"])
        if name == "to_host":
            return self._read(fn, args[0] if args else kwargs["buf"])
        args, where = _positional(fn, args, kwargs)
        self.depth += 1
        try:
            result = fn(*args)
        finally:
            self.depth -= 1
        # (a kernel outside the contract, registered by the user, may write any of its arguments)
        writes = kernels.WRITES[name] if name in kernels.WRITES else where
        for arg in writes:
            written = args[where[arg]]
            for buf in written if isinstance(written, list) else (written,):
                if getattr(buf, "base", False) is not False and id(root(buf)) not in self.own:
                    self.wrote_state = True
                elif buf is not None and id(root(buf)) in self.host_arrays:   # (it must start each replay as made)
                    made, values = self.host_arrays.pop(id(root(buf)))
                    self.steps.insert(0, (np.copyto, (made, values)))
                    self.kinds.insert(0, "restore")
                    self.writes.insert(0, (0,))
        if name in kernels.DRAWS:
            self._draw(device_type, args, *(where[a] for a in kernels.DRAWS[name]))
        self._step(name, fn, args, tuple(where[a] for a in writes))
        return result

    def _step(self, kind, fn, args, writes=()):
        """Append a step: ``kind`` is the primitive's name, or one of STEP_KINDS for the others; ``writes``:
        the positions of the arguments it writes (a list there: every buffer in it)."""
        self.steps.append((fn, args))
        self.kinds.append(kind)
        self.writes.append(writes)
        for position, arg in enumerate(args):
            listed = isinstance(arg, list)
            for buf in arg if listed else (arg,):
                base = getattr(buf, "base", False)
                if base is None:        # (each place that holds a buffer is a reference to it)
                    self.held[id(buf)] += 1
                elif base is not False:
                    self.view_uses[id(buf)] += 1
                    if id(buf) not in self.views:   # (a view holds its base once)
                        self.views[id(buf)] = buf
                        self.views_of[id(base)].append(id(buf))
                        self.held[id(base)] += 1
                if base is not False:
                    self._named(buf if base is None else base, not listed, position in writes, args)

    def _named(self, root, one_for_one, written, args):
        """A step (``args``) names ``root`` (directly or through a view), writing it or not, one for one or in a
        list: what _alloc may hand out again, and where a buffer it handed out again starts anew."""
        if not one_for_one or (id(root) not in self.named and not written):
            self.unspared.add(id(root))
        self.named.add(id(root))
        if id(root) in self.handed:
            self.handed.discard(id(root))
            self.reborn[id(root)].append(args)

    def reborn_in(self, steps) -> dict:
        """id of a buffer _alloc handed out again -> ids of the argument containers, among ``steps`` (a later pass
        may have replaced some), of the steps where it starts anew. The recorder kept the containers alive, so
        an id found among the steps' is that very container; it lets go of them now."""
        live = {id(args) for _, args in steps}
        found = {key: {id(args) for args in containers if id(args) in live} for key, containers in self.reborn.items()}
        self.reborn.clear()
        return found

    def holding(self, buf) -> int:
        """How many references to ``buf`` the recorder holds: the graph's, which do not make it shared
        (an op that adopts a buffer nobody else refers to, as AccumulateGrad does, discounts them)."""
        return self.held[id(buf)] + (self.own.get(id(buf)) is buf)

    def _alloc(self, device_type, fn, args, kwargs):
        """A buffer for ``alloc``: on the CPU, one alloc made earlier in the capture whose value is spent, if one
        of the size and dtype is, else a new one. Spent: only the steps and ``own`` refer to it (no later step can
        reach it), and a step wrote it before any read it (no value of it lasts from one replay to the next). So
        the capture holds about what the eager call holds, not every buffer it made, and a replay reuses the
        buffer just as the capture did. Buffers named in lists are left alone (a list may be named twice: its
        references are not counted one for one); so are other devices' (a stream may still be using one), and
        small ones: they save little, and a buffer handed out again orders the launches that use it, which keeps
        fusion from moving a constant's copy ahead of a group that read another constant of its size."""
        if device_type != "cpu":
            return fn(*args, **kwargs)
        numel, dtype = _positional(fn, args, kwargs)[0]
        if numel < REUSE_MIN:
            return fn(numel, dtype)
        ids = self.spare[(numel, dtype)]
        for key in ids:
            if key not in self.unspared and self._spent(key):
                self.handed.add(key)
                return self.own[key]
        buf = fn(numel, dtype)
        ids.append(id(buf))
        return buf

    def _spent(self, key) -> bool:
        """Only the steps and the recorder refer to the buffer ``own[key]`` and to its views in the steps (and ``own``
        keeps the buffer itself, not a view of it that a host step's result made the graph's)."""
        return self.own[key].base is None and _references(self.own, key) - _LONE == self.held[key] and all(
            _references(self.views, view) - _LONE == self.view_uses[view] for view in self.views_of[key])

    def _owned(self, buf):
        self.own[id(root(buf))] = buf
        return buf

    def _from_host(self, device_type, fn, array):
        buf = fn(array)
        if root(buf) is root(array):   # (on the CPU, the host array minidl made for the new tensor itself)
            self.host_arrays[id(root(buf))] = (buf, np.array(buf, copy=True))
            return self._owned(buf)
        constant = fn(np.array(array, copy=True))
        layout = Layout((buf.size,))
        self._step("copy", kernels.lookup("copy", device_type), (constant, layout, buf, layout), (2,))
        return self._owned(buf)

    def _read(self, to_host, buf):
        host = to_host(buf)
        self._note_read(_check_read, to_host, buf, np.asarray(host).tobytes())
        return host

    def read_view(self, buf, layout):
        """A CPU tensor is read through a numpy view of its memory (``.numpy()``, ``.item()``, ``bool()``):
        no ``to_host`` kernel runs, so ``Tensor.numpy`` reports it here."""
        if self.depth or self.broken or self.done:
            return
        self._note_read(_check_view, buf, layout, numpy_view(buf, layout).tobytes())

    def _note_read(self, check, source, buf, expected: bytes):
        if self.wrote_state:
            self.graph_break("a tensor's value is read on the host (.item(), bool(), .tolist(), printing) after "
                             "the call changed parameters, gradients or other state")
            return
        self.reads += 1
        self._step("read", check, (source, buf, expected, user_line()))

    def _draw(self, device_type, args, seed_at, offset_at):
        """Tie a launch's (seed, offset) to the generator whose draw in this call it is; none: drawn before
        the call (a backward replaying a forward's dropout), fixed arguments."""
        seed, offset = args[seed_at], args[offset_at]
        found = [(generator, offset - start) for generator, (claimed_seed, start, end) in self.claims.items()
                 if seed == claimed_seed and start <= offset < end and generator.device.type == device_type]
        if len(found) > 1:
            self.graph_break("two generators of one seed and device draw in the call: their draws cannot be told "
                             "apart")
        elif found:
            self.draws.append((args, seed_at, offset_at, *found[0]))

    # -- what the lower layers report (minidl._tracing) ----------------------------------------------
    def claim(self, generator, seed, offset, count):
        found = self.claims.get(generator)
        if found is None:
            self.claims[generator] = [seed, offset, offset + count]
        elif found[0] != seed or found[2] != offset:
            self.graph_break("a generator is reseeded or set to another state during the call")
        else:
            found[2] = offset + count

    def host_step(self, run):
        if self.depth:   # (inside another host step or a kernel: part of that one)
            return run()
        self.depth += 1
        try:
            result = run()
        finally:
            self.depth -= 1
        if not self.broken:
            if isinstance(result, Tensor):   # (what launches after it read: the replay refreshes it in place)
                self._owned(buf(result))
                self._step("host", _run_into, (run, result))
            else:
                self._step("host", run, ())
            self.wrote_state = True
        return result

    def made_once(self, make):
        self.depth += 1   # (its launches are no steps, its buffers not the graph's)
        try:
            return make()
        finally:
            self.depth -= 1

    def host_check(self, check):
        self.depth += 1   # (its reads are not guards)
        try:
            check()
        finally:
            self.depth -= 1
        if not self.broken:
            self._step("check", check, ())

    def accumulating(self, leaf):
        """The backward is about to add into ``leaf.grad``: what it finds there is part of the capture (unless
        the leaf was made by the call: a replay's .grad of it is the replay's own, whatever the last one left)."""
        if id(root(buf(leaf))) not in self.own:
            self.leaves[id(leaf)] = leaf   # (guarded to have no gradient hooks: the capture found none)
            if id(leaf) not in self.grads_set:
                self.entry_grads.append((leaf, leaf.grad))

    def grad_set(self, leaf):
        if self.depth or self.broken or self.done:
            return
        self._step("grad", setattr, (leaf, "grad", leaf.grad))
        self.grads_set.add(id(leaf))
        if leaf.grad is not None:
            self.wrote_state = True

    def saw_module(self, module):
        self.modules[id(module)] = module
        self._first_mode(module)

    def mode_set(self, module, training):
        """``module.training`` about to be set during the call (``train()``, ``eval()``): a step sets it
        again at each replay. Its mode before is a guard all the same: the call may have read it
        (``was = model.training; model.eval(); ...; model.train(was)``)."""
        if self.depth or self.broken or self.done:
            return
        self._first_mode(module)
        self._step("mode", object.__setattr__, (module, "training", training))

    def requires_grad_set(self, t, value):
        """``t.requires_grad`` about to be set during the call: a step sets it again at each replay, and
        its value before is a guard (unless the call made ``t``)."""
        if self.depth or self.broken or self.done:
            return
        if id(t) not in self.entry_requires_grad and id(root(buf(t))) not in self.own:
            self.entry_requires_grad[id(t)] = (t, t.requires_grad)
        if t.requires_grad != value:   # (else a no-op: with its value guarded, at a replay too)
            self._step("requires_grad", _set_requires_grad, (t, value))

    def _first_mode(self, module):
        """The training mode a module had when the call first touched it: its mode at the call's start
        (None for a module the call is making)."""
        if id(module) not in self.entry_modes:
            self.entry_modes[id(module)] = (module, getattr(module, "training", None))

    def graph_break(self, reason: str):
        if self.broken:
            return
        where = user_line()
        if self.fullgraph:
            raise GraphBreakError(f"minidl.compile(fullgraph=True): {reason}, at {where}")
        self.broken = (reason, where)

