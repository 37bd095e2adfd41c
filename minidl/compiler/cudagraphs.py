"""CUDA-graph replay of a compiled graph (``mode="reduce-overhead"``, ``backend="cudagraphs"``).

A plain replay (``graph.py``) still calls each kernel's Python wrapper, one launch at a time. Here, at a
graph's first replay, each maximal run of CUDA kernel steps between the steps that run Python (a host step,
a read, a check, a CPU kernel: see ``recorder.STEP_KINDS``) is captured once into one ``minidl.cuda.CUDAGraph``,
on a side stream and from one memory pool per graph; from then on the run is one graph launch. The steps that
only set Python attributes (``.grad``, ``training``, ``requires_grad``) touch no device memory, so they do not
cut a run: they move to just after it, in their order.

Random draws: a captured launch keeps the arguments it was captured with, so a run's draws from a generator
read their Philox state from a device buffer of that generator's instead (the draw kernels' state-buffer form,
``minidl/kernels/__init__.py``), their offset argument becoming the delta from the call's first claim. The
replay's draw loop (``graph.py``) puts the generator's (seed, start) into a host pair, which each run writes
into the buffer before its launch: every replay draws what the eager call and a plain replay would, and
advances the generator as they do.

A graph without CUDA kernel steps is left as it is (on the CPU, torch's reduce-overhead runs without CUDA
graphs too), and so is a run whose capture fails (a kernel that needs the host): it replays plainly.
"""
from __future__ import annotations

import numpy as np

from .. import int64, kernels
from ..cuda.graphs import CUDAGraph, graph as capturing, graph_pool_handle
from ..layout import Layout
from .recorder import STEP_KINDS

ATTRIBUTE_KINDS = ("grad", "mode", "requires_grad")   # Python attribute sets: no device work, they do not cut
_ONE = Layout((1,))
_AT = (Layout((1,), (1,), 0), Layout((1,), (1,), 1))


class CudaGraphs:
    """What ``install`` made of a graph: its CUDA graphs, how often they were launched, and why runs stayed
    plain."""

    def __init__(self):
        self.graphs = []      # one CUDAGraph per captured run
        self.launches = 0     # graph launches, over all replays
        self.plain = []       # why each run left plain could not be captured (its capture's error)
        self.pool = graph_pool_handle()


def install(graph):
    """Rewrite ``graph.steps``, ``kinds`` and ``draws`` so that each run of CUDA kernel steps is one graph
    launch; returns a ``CudaGraphs``, or None where the graph has no CUDA kernel step."""
    runs = _runs(graph.steps, graph.kinds)
    if not runs:
        return None
    made = CudaGraphs()
    states = {}   # generator -> (its device state buffer, the host pair a replay writes into it)
    live = set()  # the generators a captured run draws from
    draws = {id(entry[0]): entry for entry in graph.draws}
    steps, kinds, at = [], [], 0
    for start, end in runs:
        steps += graph.steps[at:start]
        kinds += graph.kinds[at:start]
        launch, moved, used = _capture(graph, start, end, draws, states, made)
        if launch is None:
            steps += graph.steps[start:end]
            kinds += graph.kinds[start:end]
        else:
            steps += [launch] + [graph.steps[i] for i in moved]
            kinds += ["cuda_graph"] + [graph.kinds[i] for i in moved]
            for entry in used:
                del draws[id(entry[0])]
                live.add(entry[3])
        at = end
    graph.steps, graph.kinds = steps + graph.steps[at:], kinds + graph.kinds[at:]
    graph.draws = list(draws.values()) + [(states[g][1], 0, 1, g, 0) for g in states if g in live]
    return made


def _runs(steps, kinds):
    """(start, end) of each maximal run of CUDA kernel steps, attribute steps inside a run included."""
    runs, start, cuda = [], None, {}
    for i, ((fn, _), kind) in enumerate(zip(steps, kinds)):
        if kind in ATTRIBUTE_KINDS and start is not None:
            continue
        if kind not in STEP_KINDS and _is_cuda_kernel(fn, kind, cuda):
            start = i if start is None else start
            continue
        if start is not None:
            runs.append((start, _trim(kinds, start, i)))
            start = None
    if start is not None:
        runs.append((start, _trim(kinds, start, len(steps))))
    return runs


def _trim(kinds, start, end):
    """A run ends at its last kernel step (attribute steps after it are no part of it)."""
    while kinds[end - 1] in ATTRIBUTE_KINDS:
        end -= 1
    return end


def _is_cuda_kernel(fn, kind, cache):
    if kind == "fused":   # (a generated kernel's launch says its device)
        return getattr(fn, "device_type", None) == "cuda"
    if kind not in cache:
        try:
            cache[kind] = kernels.lookup(kind, "cuda")
        except RuntimeError:   # (a CPU-only kernel a user registered)
            cache[kind] = None
    return fn is cache[kind]


def _capture(graph, start, end, draws, states, made):
    """Capture steps start..end: (the launch step, the positions of the attribute steps to run after it, the
    draw entries it took over), or (None, (), ()) where the capture failed."""
    run = [(i, graph.steps[i]) for i in range(start, end) if graph.kinds[i] not in ATTRIBUTE_KINDS]
    moved = [i for i in range(start, end) if graph.kinds[i] in ATTRIBUTE_KINDS]
    used = [draws[id(args)] for _, (_, args) in run if id(args) in draws]
    for args, seed_at, offset_at, generator, delta in used:
        if generator not in states:
            states[generator] = (kernels.lookup("alloc", "cuda")(2, int64), [0, 0])
        args[seed_at], args[offset_at] = states[generator][0], delta
    cuda_graph = CUDAGraph()
    try:
        with capturing(cuda_graph, pool=made.pool):
            for _, (fn, args) in run:
                fn(*args)
    except Exception as e:   # (the run replays plainly, its draws from their arguments again)
        made.plain.append(f"steps {start}..{end - 1}: {e}")
        return None, (), ()
    made.graphs.append(cuda_graph)
    pairs = list({id(states[g][1]): states[g] for _, _, _, g, _ in used}.values())
    return (_launch, (cuda_graph, pairs, made)), moved, used


def _launch(cuda_graph, pairs, made):
    for state, pair in pairs:
        _write(state, pair)
    cuda_graph.replay()
    made.launches += 1


def _write(state, pair):
    """state[:] = pair, by kernels taking the values as arguments (no copy from the host to wait for)."""
    from_host, copy = kernels.lookup("from_host", "cuda"), kernels.lookup("copy", "cuda")
    for value, layout in zip(pair, _AT):
        copy(from_host(np.array([value], np.uint64).view(np.int64)), _ONE, state, layout)
