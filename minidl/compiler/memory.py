"""The memory plan: a graph's intermediates share memory where their lifetimes do not overlap.

A capture allocates a fresh buffer for every intermediate, as the eager call did, and the graph keeps them
all between calls: its memory is the sum of the step's allocations, not the eager peak. Yet an intermediate
only matters from the step that writes it to the last step that reads it. So, once a graph is captured:

1. each buffer the capture allocated gets a lifetime: the first and the last step that use it (directly,
   or through a 1-D slice of it, as the fused kernels take packed tensors);
2. a buffer is *pinned* (kept to itself) when anything but the graph's steps refers to it: a tensor that
   outlives the call (a gradient, an output, the graph's copy of an argument, what a host step holds), a
   view of it that is not a 1-D slice. That is read off the reference counts: the steps' references are
   counted, and any reference more means someone else holds it;
3. the others are packed into slabs, first use first: a buffer takes a slab of its type and dtype whose
   last occupant's lifetime has ended (the smallest that fits, else the largest, which then grows), and
   the slab is the largest buffer assigned to it;
4. every step's arguments are rebound: a buffer becomes the front of its slab, a slice of it the same
   slice of the slab.

Replays then write and read the same slabs in the same order; no buffer is allocated or freed.
"""
from __future__ import annotations

import collections
import sys


def share_memory(steps, writes, candidates) -> int:
    """Rebind the buffers of ``steps`` (a graph's (callable, args) list, changed in place; ``writes``: per
    step, the positions of the arguments it writes) so that those of ``candidates`` (ids of root buffers
    the capture allocated) share slabs; returns the bytes saved."""
    uses = collections.Counter()
    objects, first, last = {}, {}, {}
    read_first = set()   # (buffers a replay reads before it writes them: their values must last)
    for i, (_, args) in enumerate(steps):
        for position, buf in _buffers(args):
            uses[id(buf)] += 1
            objects[id(buf)] = buf
            owner = _root(buf)
            objects[id(owner)] = owner
            if id(owner) not in first:
                first[id(owner)] = i
                if position not in writes[i]:
                    read_first.add(id(owner))
            last[id(owner)] = i
    views_of = collections.defaultdict(list)
    for buf in objects.values():
        if buf.base is not None:
            views_of[id(buf.base)].append(buf)
    pinned = set()
    for key in list(objects):
        buf = objects[key]
        # the references expected: each use in a step, this dict, the name buf, getrefcount's argument,
        # and for a view the views_of list, for a buffer each view of it found in the steps
        expected = uses[key] + 3 + (len(views_of[key]) if buf.base is None else 1)
        if sys.getrefcount(buf) > expected or (buf.base is not None and not _slice(buf)):
            pinned.add(id(_root(buf)))
    buf = None
    shared = [objects[key] for key in first if key in candidates and key not in pinned and key not in read_first]
    slabs = _pack(shared, first, last)
    distinct = {id(slab): slab for slab in slabs.values()}
    moved = {key: slab for key, slab in slabs.items() if objects[key] is not slab}
    if moved:
        _rebind(steps, moved)
    return sum(b.nbytes for b in shared) - sum(slab.nbytes for slab in distinct.values())


def _pack(buffers, first, last) -> dict:
    """id(buffer) -> the buffer whose memory it will use (its slab)."""
    slabs = {}
    live = collections.defaultdict(list)   # (type, dtype) -> [[last step, size, members]] of each slab
    for buf in sorted(buffers, key=lambda b: first[id(b)]):
        kind = (type(buf), buf.dtype)
        free = [s for s in live[kind] if s[0] < first[id(buf)]]
        fits = [s for s in free if s[1] >= buf.size]
        slab = min(fits, key=lambda s: s[1]) if fits else max(free, key=lambda s: s[1], default=None)
        if slab is None:
            slab = [0, 0, []]
            live[kind].append(slab)
        slab[0] = last[id(buf)]
        slab[1] = max(slab[1], buf.size)
        slab[2].append(buf)
    for groups in live.values():
        for _, _, members in groups:
            biggest = max(members, key=lambda b: b.size)
            slabs.update((id(b), biggest) for b in members)
    return slabs


def _rebind(steps, moved):
    """Each step's buffers of ``moved`` (id -> slab) replaced by the slab's front, their slices likewise."""
    made = {}

    def new(buf):
        found = made.get(id(buf))
        if found is None:
            owner = _root(buf)
            slab = moved.get(id(owner))
            if slab is None:
                return buf
            start = 0 if buf is owner else (_address(buf) - _address(owner)) // buf.itemsize
            found = made[id(buf)] = slab[start:start + buf.size]
        return found

    for i, (fn, args) in enumerate(steps):
        if isinstance(args, list):
            for j, arg in enumerate(args):
                if isinstance(arg, list):
                    arg[:] = [new(b) if _is_buffer(b) else b for b in arg]
                elif _is_buffer(arg):
                    args[j] = new(arg)
        elif any(_is_buffer(arg) for arg in args):
            steps[i] = (fn, tuple(new(a) if _is_buffer(a) else a for a in args))


def _buffers(args):
    """(position, buffer) of each buffer among a step's arguments (and in the lists among them)."""
    for position, arg in enumerate(args):
        for item in arg if isinstance(arg, list) else (arg,):
            if _is_buffer(item):
                yield position, item


def _is_buffer(x) -> bool:
    """A device array (numpy's or CuPy's): what kernels take as buffers."""
    return hasattr(x, "base") and hasattr(x, "dtype") and hasattr(x, "strides")


def _root(buf):
    return buf if buf.base is None else buf.base


def _slice(view) -> bool:
    """A 1-D run of its base's elements (what ``packed_buffer`` and friends hand the kernels)."""
    return view.ndim == 1 and (view.size <= 1 or view.strides[0] == view.itemsize) and view.base.base is None


def _address(buf) -> int:
    face = getattr(buf, "__cuda_array_interface__", None) or buf.__array_interface__
    return face["data"][0]
