"""The memory plan: a graph's intermediates share memory where their lifetimes do not overlap.

A capture keeps every buffer the call allocated (on the CPU it hands a spent one out again to the next alloc
of its size, but only when one is spent then), and the graph keeps them all between calls. Yet an intermediate
only matters from the step that writes it to the last step that reads it. So, once a graph is captured:

1. each root buffer the steps use gets a lifetime: the first and the last step that use it (directly, in
   a list of a multi-tensor kernel, or through a 1-D slice of it, as the fused kernels take packed tensors);
   a buffer the capture handed out again once its value was spent (``Recorder._alloc``) has one such span
   per value it held, and its memory is free in between;
2. a buffer is *pinned* (kept to itself) when its value may matter outside that lifetime:
   - anything but the steps refers to it (a gradient, an output, the graph's copy of an argument, a tensor a
     host step or a check reads, a list of buffers kept elsewhere): read off the reference counts, the
     steps' own references counted, any more meaning someone else holds it;
   - a replay reads it before writing it (a constant from host data: its value lasts from call to call);
   - it is seen through a view that is not a 1-D slice of its own dtype, or it is no flat 1-D buffer;
3. the others, which the capture made, are packed into slabs, first use first: a buffer takes a slab of its
   type, dtype and device whose occupants' lifetimes do not overlap its own (the smallest that fits, else
   the largest, which then grows); a slab is the largest buffer assigned to it;
4. every step's arguments are rebound: a buffer becomes the front of its slab, a slice of it the same
   slice of the slab. Nothing then refers to the old buffers: they are freed.

Replays then write and read the same slabs in the same order; no buffer is allocated or freed.
"""
from __future__ import annotations

import collections
import sys
from typing import NamedTuple


class Plan(NamedTuple):
    saved_bytes: int   # what the shared slabs save over one buffer per intermediate
    held_bytes: int    # what the graph keeps alive: buffers the capture made, and those only its steps name


def share_memory(steps, writes, candidates, reborn=None) -> Plan:
    """Rebind the buffers of ``steps`` (a graph's (callable, args) list, changed in place; ``writes``: per
    step, the positions of the arguments it writes) so that those of ``candidates`` (ids of root buffers
    the capture made) share slabs. ``reborn``: id of a buffer the capture handed out again -> ids of the
    argument containers of the steps where it starts anew (its lifetime has gaps there, for others to use).
    A pass that changes the steps before (fusion) keeps ``writes`` in step with them, gives the steps it
    makes new argument containers (a buffer reborn in one is then taken to live through: safe), and drops
    its own references to the buffers (any reference more pins a buffer)."""
    if len(writes) != len(steps):
        raise ValueError(f"share_memory: {len(steps)} steps but {len(writes)} entries of writes")
    uses = _Uses(steps, writes, reborn or {})
    outside = _held_elsewhere(uses.objects, uses.refs)
    pinned = uses.pinned | uses.read_first | _roots_of(uses, outside)
    roots = {key: uses.objects[key] for key in uses.spans}
    shared = [roots[key] for key in uses.spans if key in candidates and key not in pinned]
    slabs = _pack(shared, uses.spans)
    moved = {key: slab for key, slab in slabs.items() if roots[key] is not slab}
    if moved:
        _rebind(steps, moved)
    saved = sum(b.nbytes for b in shared) - _bytes(slabs.values())
    return Plan(saved, _bytes(slabs.get(key, root) for key, root in roots.items()
                              if key in candidates or key not in outside))


def held_elsewhere(steps, writes, reborn=None) -> set:
    """ids of the root buffers of ``steps`` that something besides the steps refers to (a tensor that outlives
    the call, an output, a list or a view kept elsewhere), read off the reference counts: their values must
    be where the steps leave them (the plan pins them; fusion stores what a group writes into them)."""
    uses = _Uses(steps, writes, reborn or {})
    return _roots_of(uses, _held_elsewhere(uses.objects, uses.refs))


def _roots_of(uses, keys) -> set:
    """ids of the roots of the buffers among ``keys`` (buffers, or lists of them, of ``uses.objects``)."""
    roots = set()
    for key in keys:
        found = uses.objects[key]
        roots.update(id(_owner(b)) for b in (found if isinstance(found, list) else [found]) if _is_buffer(b))
    return roots


def _bytes(buffers) -> int:
    """The bytes of the distinct buffers among ``buffers``."""
    return sum(b.nbytes for b in {id(b): b for b in buffers}.values())


class _Uses:
    """What the steps do with buffers: every buffer, root and list they name (``objects``, id -> it), the
    references the steps hold to each (``refs``: a view holds one to its base), each root's lifetime (``spans``:
    [first step, last step] of each time it holds a value, one unless it is reborn), the roots a replay reads
    before it writes them, and those no slab may hold (``pinned``)."""

    def __init__(self, steps, writes, reborn):
        self.objects, self.refs, self.spans = {}, collections.Counter(), {}
        self.read_first, self.pinned = set(), set()
        counted = set()
        for i, (_, args) in enumerate(steps):
            if id(args) not in counted:   # (a container shared by two steps holds its items once)
                counted.add(id(args))
                self._count(args)
            for position, buf in buffers(args):
                owner = _owner(buf)
                key = id(owner)
                spans = self.spans.get(key)
                if spans is None:
                    self.spans[key] = [[i, i]]
                    if position not in writes[i]:
                        self.read_first.add(key)
                elif spans[-1][1] < i and position in writes[i] and id(args) in reborn.get(key, ()):
                    spans.append([i, i])   # (handed out again, and written first: the value before is spent)
                else:
                    spans[-1][1] = i
                if buf is not owner and not _slice(buf, owner) or not _flat(owner):
                    self.pinned.add(key)

    def _count(self, container):
        """Count the references ``container`` (a step's arguments, or a list among them) holds, once."""
        for item in container:
            if isinstance(item, list) or _is_buffer(item):
                self.refs[id(item)] += 1
                if id(item) in self.objects:
                    continue
                self.objects[id(item)] = item
                if isinstance(item, list):
                    self._count(item)
                elif _owner(item) is not item:   # (a view holds its base: a reference the steps hold)
                    self.objects[id(item.base)] = item.base
                    self.refs[id(item.base)] += 1


def _held_elsewhere(objects, refs) -> set:
    """ids of the objects referred to by more than the steps' references (``refs``) and our own."""
    ours = _refcounts({0: object()})[0]   # (the references a lone object gets here: the dict, the loop, the call)
    return {key for key, count in _refcounts(objects).items() if count - ours > refs[key]}


def _refcounts(objects) -> dict:
    return {key: sys.getrefcount(value) for key, value in objects.items()}


def _pack(buffers, spans) -> dict:
    """id(buffer) -> the buffer whose memory it will use (its slab)."""
    slabs = {}
    live = collections.defaultdict(list)   # (type, dtype, device) -> [[spans taken, size, members]] of each slab
    for buf in sorted(buffers, key=lambda b: spans[id(b)][0][0]):
        kind = (type(buf), buf.dtype, getattr(getattr(buf, "device", None), "id", None))
        mine = spans[id(buf)]
        free = [s for s in live[kind] if not any(a <= d and c <= b for a, b in s[0] for c, d in mine)]
        fits = [s for s in free if s[1] >= buf.size]
        slab = min(fits, key=lambda s: s[1]) if fits else max(free, key=lambda s: s[1], default=None)
        if slab is None:
            slab = [[], 0, []]
            live[kind].append(slab)
        slab[0].extend(mine)
        slab[1] = max(slab[1], buf.size)
        slab[2].append(buf)
    for groups in live.values():
        for _, _, members in groups:
            biggest = max(members, key=lambda b: b.size)
            slabs.update((id(b), biggest) for b in members)
    return slabs


def _rebind(steps, moved):
    """Each step's buffers of ``moved`` (id -> slab) replaced by the slab's front, their slices likewise;
    lists and the steps' argument lists are changed in place (the graph's draws hold the latter)."""
    made = {}

    def new(x):
        if isinstance(x, list):
            x[:] = [new(item) for item in x]
            return x
        if not _is_buffer(x):
            return x
        found = made.get(id(x))
        if found is None:
            owner = _owner(x)
            slab = moved.get(id(owner))
            if slab is None:
                return x
            start = 0 if x is owner else (address(x) - address(owner)) // x.itemsize
            found = made[id(x)] = slab[start:start + x.size]
        return found

    for i, (fn, args) in enumerate(steps):
        if isinstance(args, list):
            args[:] = [new(a) for a in args]
        else:
            steps[i] = (fn, tuple(new(a) for a in args))


def buffers(args):
    """(position, buffer) of each buffer among a step's arguments (and in the lists among them)."""
    for position, arg in enumerate(args):
        for item in arg if isinstance(arg, list) else (arg,):
            if _is_buffer(item):
                yield position, item


def _is_buffer(x) -> bool:
    """A device array (numpy's or CuPy's): what kernels take as buffers."""
    return hasattr(x, "base") and hasattr(x, "dtype") and hasattr(x, "strides")


def _owner(buf):
    """The array whose memory ``buf`` is: itself, or the array it views (numpy and CuPy keep the one that owns
    the memory as ``base``; a base that is no array, as a memory map, leaves ``buf`` its own, unflat, owner)."""
    return buf if buf.base is None or not _is_buffer(buf.base) else buf.base


def _flat(root) -> bool:
    """A 1-D buffer that owns its memory: what a slab is, and what can move into one."""
    return root.base is None and root.ndim == 1 and (root.size <= 1 or root.strides[0] == root.itemsize)


def _slice(view, owner) -> bool:
    """A 1-D run of its owner's elements, of its dtype (what ``packed_buffer`` and friends hand the kernels)."""
    return view.ndim == 1 and view.dtype == owner.dtype and (view.size <= 1 or view.strides[0] == view.itemsize)


def address(buf) -> int:
    face = getattr(buf, "__cuda_array_interface__", None) or buf.__array_interface__
    return face["data"][0]
