"""Choosing where to cut a model into stages: measure each block, then balance the slowest stage.

``split_by_cost(blocks, num_stages, sample_input)`` runs every block's forward and backward on
what the blocks before it make of ``sample_input`` (one micro-batch), times them (the fastest of a
few runs) and counts the activation bytes each keeps for backward. ``best_cut`` then picks the
contiguous cut whose slowest stage is fastest (dynamic programming over the cut points), and the
cut is printed with each stage's time and memory.
"""
from __future__ import annotations

import time

import minidl
from minidl import nn

from .stage import as_tuple, graph_bytes


def best_cut(costs, num_stages) -> list:
    """Boundaries [0, b1, ..., len(costs)] of the contiguous split of ``costs`` into ``num_stages``
    non-empty parts whose largest sum is smallest (the earliest such cut on ties)."""
    n = len(costs)
    if not 1 <= num_stages <= n:
        raise ValueError(f"split_by_cost: {n} blocks cannot make {num_stages} non-empty stages")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    # worst[k][j]: the smallest possible slowest stage when the first j blocks form k stages
    inf = float("inf")
    worst = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    choice = [[0] * (n + 1) for _ in range(num_stages + 1)]
    worst[0][0] = 0.0
    for k in range(1, num_stages + 1):
        for j in range(k, n + 1):
            for i in range(k - 1, j):
                candidate = max(worst[k - 1][i], prefix[j] - prefix[i])
                if candidate < worst[k][j]:
                    worst[k][j], choice[k][j] = candidate, i
    bounds = [n]
    for k in range(num_stages, 0, -1):
        bounds.append(choice[k][bounds[-1]])
    return bounds[::-1]


def measure(blocks, sample_input, repeats=3, timer=time.perf_counter) -> list:
    """(seconds for forward + backward, activation bytes) of each block, on what the blocks before
    it make of ``sample_input``. The time is the fastest of ``repeats`` runs: other work on the
    machine only ever adds time, so the minimum is the least disturbed measurement. ``timer``:
    the clock read around each run (tests give one that blocks advance by known costs)."""
    found, x = [], as_tuple(sample_input)
    for block in blocks:
        params = {id(p._storage) for p in block.parameters()}
        times, held = [], 0
        for _ in range(repeats):
            inputs = tuple(t.detach().requires_grad_(t.dtype.is_floating_point) for t in x)
            start = timer()
            outputs = as_tuple(block(*inputs))
            held = graph_bytes(outputs, params)
            floats = [o for o in outputs if o.requires_grad]
            if floats:
                minidl.autograd.backward(floats, [minidl.ones_like(o) for o in floats])
            times.append(timer() - start)
        block.zero_grad()
        found.append((min(times), held))
        x = tuple(o.detach() for o in outputs)
    return found


def split_by_cost(module_list, num_stages, sample_input, repeats=3, log=print, timer=time.perf_counter) -> list:
    """``num_stages`` ``nn.Sequential`` stages of consecutive blocks of ``module_list``, cut where the
    slowest stage (forward + backward, as measured on ``sample_input`` with ``timer``) is fastest;
    ``log`` gets the cut and each stage's cost."""
    blocks = list(module_list)
    costs = measure(blocks, sample_input, repeats, timer)
    bounds = best_cut([seconds for seconds, _ in costs], num_stages)
    log(f"split_by_cost: {len(blocks)} blocks into {num_stages} stages, cut before blocks {bounds[1:-1]}")
    for s, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        seconds = sum(c[0] for c in costs[a:b])
        memory = sum(c[1] for c in costs[a:b])
        log(f"  stage {s}: blocks {a}..{b - 1}, forward + backward {seconds * 1e3:.2f} ms, "
            f"activations {memory / 2**20:.2f} MB")
    return [nn.Sequential(*blocks[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
