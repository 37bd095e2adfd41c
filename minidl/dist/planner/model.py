"""The cost model: a plan's step time, bytes sent and peak memory per rank, predicted from a Profile.

Step time = the pipeline's makespan (each stage's forward and backward per micro-batch, the blocks' measured times,
tensor-parallel collectives included; the messages between stages at the link's measured speed; the schedule's own
programs played with those durations, so its bubble is in it) + the data-parallel collectives (DDP's buckets,
ZeRO's broadcasts, FSDP's gathers and reduce-scatters: nothing assumed hidden, since on a CPU the communication
thread takes a core from the compute) + the pipeline's tied gradients + the optimizer's step on what the rank steps.

Bytes per rank: every collective the plan calls, each by the algorithm's exact count (``algorithms.volume``);
tensor-parallel blocks' bytes as counted when measured; pipeline messages with their shape headers.

Memory per rank: parameters, gradients, optimizer state and communication buffers as the placements give them,
plus the activations the blocks were measured to keep, walked through the step in order (forward adds, backward
frees) with each block's own peak on top, and the micro-batches a schedule keeps in flight.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import minidl

from ..algorithms import volume
from ..pipelining import actions
from ..pipelining.cost import best_cut
from ..pipelining.schedules import (Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B,
                                   ScheduleInterleavedZeroBubble)
from ..pipelining.stage import HEADER
from ..optim.zero_redundancy_optimizer import deal
from ..reducer import assign_buckets
from ..tensor.placement_types import Shard

SINGLE = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
MULTI = {"interleaved-1f1b": ScheduleInterleaved1F1B, "zero-bubble": ScheduleInterleavedZeroBubble}
BUCKET_BYTES = 25 * 1024 * 1024   # DDP's default bucket_cap_mb


@dataclass
class Prediction:
    seconds: float
    parts: dict                 # where the time goes: "compute and pipeline", "collectives", "optimizer"
    bubble: float               # the pipeline's idle fraction (0 without one)
    memory: list                # peak bytes per rank
    sent: list                  # bytes sent per rank per step
    bounds: list = field(default_factory=list)   # the stage cut: blocks bounds[s]..bounds[s+1]-1 on stage s


@dataclass
class _Param:
    index: int
    shape: tuple
    dtype: str

    @property
    def itemsize(self):
        return getattr(minidl, self.dtype).itemsize

    def numel(self):
        return math.prod(self.shape)

    @property
    def nbytes(self):
        return self.numel() * self.itemsize


class _Stand:
    """What reducer.assign_buckets asks of a parameter."""

    def __init__(self, p):
        self.dtype, self.device, self._numel = getattr(minidl, p.dtype), "cpu", p.numel()

    def numel(self):
        return self._numel


def _unique(blocks) -> list:
    """The parameters of these block costs, a tied one once (the first place), in order."""
    seen, out = set(), []
    for c in blocks:
        for index, shape, dtype in c.params:
            if index not in seen:
                seen.add(index)
                out.append(_Param(index, shape, dtype))
    return out


def stage_bounds(costs, num_stages) -> list:
    """The cut of the blocks (the loss riding with the last) into ``num_stages`` stages whose slowest is fastest."""
    per_block = [c.forward + c.backward for c in costs[:-1]]
    per_block[-1] += costs[-1].forward + costs[-1].backward
    return best_cut(per_block, num_stages)


def _coordinates(layout, rank) -> tuple:
    """(dp, pp, tp) coordinates of global ``rank`` on the mesh (dp, pp, tp), row-major."""
    return rank // (layout.pp * layout.tp), rank // layout.tp % layout.pp, rank % layout.tp


# ------------------------------------------------------------------------------------------------ traffic
class _Traffic:
    """One rank's collectives of a step: bytes (exact) and seconds (the profile's links)."""

    def __init__(self, profile):
        self.profile, self.bytes, self.seconds = profile, 0, 0.0
        self.scratch = {}   # group: the receive scratch its communicator keeps (the largest asked for)

    def add(self, kind, numel, dtype, k, rank, root=0, times=1, timed=True, group="dp"):
        """``dtype``'s name (bfloat16 is reduced in float32: 4 bytes an element on the wire); ``timed``: False
        where the blocks' measured times hold the collective already (FSDP's)."""
        if k <= 1 or times == 0:
            return
        itemsize = getattr(minidl, dtype).itemsize
        widened = 4 if dtype == "bfloat16" and kind in volume.REDUCING else None
        moved = widened or itemsize
        extra = {"root": root} if kind == "broadcast" else {}
        self.bytes += times * volume.sent_bytes(kind, numel, itemsize, k, rank, widened_itemsize=widened, **extra)
        self.seconds += timed * times * self.profile.link_seconds(kind, k, numel * moved)
        self.scratch[group] = max(self.scratch.get(group, 0), volume.scratch_bytes(kind, numel, moved, k))

    def message(self, nbytes, times=1):
        """A pipeline message of ``nbytes`` (the peer's receive is not this rank's bytes)."""
        self.bytes += times * nbytes
        self.seconds += times * self.profile.link_seconds("send", 2, nbytes)


def fsdp_groups(blocks, shared) -> tuple:
    """FSDP's groups, as build makes them: ([the parameters of each block with parameters that shares none with
    another (``shared``): ``fully_shard(block)``], the root's: every parameter left, tied ones, or None)."""
    groups = [_unique([c]) for i, c in enumerate(blocks) if c.params and i not in shared]
    rest = _unique([c for i, c in enumerate(blocks) if i in shared])
    return groups, rest or None


def _padded(p, k) -> int:
    """Elements of one rank's block of ``p`` in FSDP's collectives: the largest shard's rows."""
    return Shard.local_shard_size_and_offset(p.shape[0], k, 0)[0] * math.prod(p.shape[1:])


def _by_dtype(params) -> dict:
    found = {}
    for p in params:
        found.setdefault(p.dtype, []).append(p)
    return found


# ------------------------------------------------------------------------------------------------ pipeline
def orders(layout) -> list:
    """Every rank's forwards and backwards [(kind, stage, mb)] in the order its schedule runs them (the
    schedule's own: stage s on rank s % pp)."""
    pp, m = layout.pp, layout.microbatches
    if layout.schedule in MULTI:
        return MULTI[layout.schedule].planned_orders(pp, layout.stages, m)
    return [[(kind, s, mb) for kind, mb in SINGLE[layout.schedule].compute_order(s, pp, m)] for s in range(pp)]


def _play(layout, took, transfer) -> tuple:
    """(makespan, idle fraction) of the schedule's programs, ``took[kind][stage]`` the seconds of each
    forward, backward or its halves (I, W) per micro-batch, ``transfer`` a message's seconds between stages:
    each rank runs its actions in order, a receive waits for the matching send to arrive."""
    pp = layout.pp
    programs = [actions.program_of(mine, layout.stages) for mine in orders(layout)]
    clock, at, arrived, busy = [0.0] * pp, [0] * pp, {}, [0.0] * pp
    while any(at[r] < len(programs[r]) for r in range(pp)):
        moved = False
        for r in range(pp):
            while at[r] < len(programs[r]):
                a = programs[r][at[r]]
                if a.kind.startswith("RECV"):
                    key = ("F", a.stage - 1, a.mb) if a.kind == "RECV_F" else ("B", a.stage + 1, a.mb)
                    if key not in arrived:
                        break
                    clock[r] = max(clock[r], arrived[key])
                elif a.kind.startswith("SEND"):
                    arrived[("F" if a.kind == "SEND_F" else "B", a.stage, a.mb)] = clock[r] + transfer
                else:
                    clock[r] += took[a.kind][a.stage]
                    busy[r] += took[a.kind][a.stage]
                at[r] += 1
                moved = True
        if not moved:
            raise RuntimeError("planner: the schedule's programs wait on each other forever")
    span = max(clock)
    return span, 1.0 - sum(busy) / (span * pp) if span else 0.0


# ------------------------------------------------------------------------------------------------ memory
def _walk(costs, live) -> tuple:
    """(peak, live after) of one micro-batch's forward and backward through ``costs`` from ``live`` bytes: each
    forward adds what its block keeps, backward frees it and leaves the gradients; each block's own peak on
    top of what is live when it runs."""
    peak = live
    for c in costs:
        peak = max(peak, live + c.forward_peak)
        live += c.held
    for c in reversed(costs):
        peak = max(peak, live + c.backward_peak)
        live += c.grads - c.held
    return peak, live


def _rank_memory(order, stages, static) -> int:
    """The peak of a pipeline rank running ``order`` (its schedule's) over ``stages`` (block costs per stage): a
    micro-batch's activations held from its F to its B (or, split, from F through I to W); a stage's gradients
    made by its first B (or W) and accumulated into after."""
    held = [sum(c.held for c in st) for st in stages]
    kept = [sum(c.kept_for_weights for c in st) for st in stages]
    grads = [sum(p.nbytes for p in _unique(st)) for st in stages]
    live, peak, made = 0, static, set()
    for kind, s, _ in order:
        base = static + live + sum(grads[t] for t in made)
        if kind == "F":
            peak = max(peak, base + max(_prefix_peaks(stages[s])))
            live += held[s]
        elif kind == "B":
            peak = max(peak, base - held[s] + max(_suffix_peaks(stages[s], s not in made)))
            live -= held[s]
            made.add(s)
        elif kind == "I":   # (the input's gradients only; the activations, and what W needs, wait for W)
            peak = max(peak, base - held[s] + max(_suffix_peaks(stages[s], False)))
            live += kept[s]
        else:               # W: the weights' gradients made (or added to), then what it kept freed
            peak = max(peak, base + (grads[s] if s not in made else 0))
            live -= held[s] + kept[s]
            made.add(s)
    return peak


def _prefix_peaks(costs) -> list:
    """Each block's forward peak above the start of the stage's forward."""
    out, live = [], 0
    for c in costs:
        out.append(live + c.forward_peak)
        live += c.held
    return out


def _suffix_peaks(costs, new_grads) -> list:
    """Each block's backward peak above the start of the stage's backward (all activations held then);
    ``new_grads``: the gradients are made here (the first backward), and stay."""
    out, live = [], sum(c.held for c in costs)
    for c in reversed(costs):
        out.append(live + c.backward_peak)
        live += (c.grads if new_grads else 0) - c.held
    return out


# ------------------------------------------------------------------------------------------------ predict
def predict(layout, profile, batch) -> Prediction:
    """The Prediction of ``layout`` for a global batch of ``batch`` rows."""
    costs = profile.blocks[layout.shape(batch)]
    bounds = stage_bounds(costs, layout.stages) if layout.pp > 1 else [0, len(costs) - 1]
    stages = [costs[a:b] + (costs[-1:] if b == len(costs) - 1 else []) for a, b in zip(bounds[:-1], bounds[1:])]
    took = {kind: [sum(getattr(c, field) for c in st) for st in stages]
            for kind, field in (("F", "forward"), ("B", "backward"), ("I", "input_grad"), ("W", "weight_grad"))}
    message = [sum(math.prod(shape) * size for shape, size in costs[b - 1].output) for b in bounds[1:-1]]
    if layout.pp > 1:   # (an activation's message follows its shape header)
        transfer = profile.link_seconds("send", 2, 8 * HEADER) + profile.link_seconds("send", 2, max(message))
        span, bubble = _play(layout, took, transfer)
    else:
        span, bubble = took["F"][0] + took["B"][0], 0.0
    order = orders(layout) if layout.pp > 1 else None
    holders = {}   # parameter index: the pipeline ranks whose stages hold it
    for s, st in enumerate(stages):
        for p in _unique(st):
            holders.setdefault(p.index, set()).add(s % layout.pp)
    seconds, memory, sent, parts = [], [], [], []
    for rank in range(layout.world_size):
        s, m, b, part = _rank(layout, profile, rank, stages, message, span, order, holders)
        seconds.append(s)
        memory.append(m)
        sent.append(b)
        parts.append(part)
    slowest = max(range(layout.world_size), key=seconds.__getitem__)
    return Prediction(seconds[slowest], parts[slowest], bubble, memory, sent, bounds)


def _rank(layout, profile, rank, stages, message, span, order, holders):
    """(seconds, peak bytes, bytes sent, parts) of one rank; ``order``: every pipeline rank's actions, ``holders``:
    each parameter's pipeline ranks."""
    dp_rank, pp_rank, tp_rank = _coordinates(layout, rank)
    held = [s for s in range(len(stages)) if s % layout.pp == pp_rank]   # (this rank's stages)
    mine, m = [c for s in held for c in stages[s]], layout.microbatches
    traffic = _Traffic(profile)
    traffic.bytes += m * sum(c.sent_forward[tp_rank] + c.sent_backward[tp_rank] for c in mine)
    for s in held if layout.pp > 1 else ():   # messages: the activations on, the gradients back
        if s < len(stages) - 1:
            traffic.message(message[s] + 8 * HEADER, m)
        if s > 0 and stages[s][0].inputs_float:
            traffic.message(message[s - 1], m)
    params = _unique(mine)
    for p in params:   # a parameter on several ranks' stages (tied): its gradient summed over those ranks
        ranks = sorted(holders[p.index])
        traffic.add("all_reduce", p.numel(), p.dtype, len(ranks), ranks.index(pp_rank), group=("tied", tuple(ranks)))
    pipeline_seconds = traffic.seconds
    modules = [_unique(stages[s]) for s in held] if layout.pp > 1 else [params]   # (one DDP each)
    stepped, static, buffers = _data_parallel(layout, traffic, params, mine, dp_rank, profile.shared, modules)
    state = profile.state[0] * len(stepped) + profile.state[1] * sum(p.nbytes for p in stepped)
    step = profile.step[0] * len(stepped) + profile.step[1] * sum(p.numel() for p in stepped)
    step_peak = profile.step_peak * max((p.nbytes for p in stepped), default=0)
    grads = sum(p.nbytes for p in params)
    base = static + state + buffers + sum(traffic.scratch.values())
    if layout.pp > 1:
        peak = _rank_memory(order[pp_rank], stages, base)
    else:
        peak, _ = _walk(mine, base)
    if layout.shard == "fsdp":
        grads = sum(p.nbytes for p in stepped)
    peak = max(peak, base + grads + step_peak)
    seconds = span + traffic.seconds + step
    parts = {"compute and pipeline": span, "collectives": traffic.seconds - pipeline_seconds,
             "optimizer": step}
    return seconds, int(peak), traffic.bytes, parts


def _data_parallel(layout, traffic, params, mine, dp_rank, shared, modules) -> tuple:
    """Add the data-parallel collectives; (the parameters this rank's optimizer steps, the bytes of parameters
    held, communication buffers held: DDP's flat buckets). ``modules``: the parameters of each module DDP wraps
    (a pipeline rank's stages, each its own)."""
    k = layout.dp
    held = sum(p.nbytes for p in params)
    if k == 1:
        return params, held, 0
    if layout.shard == "fsdp":
        groups, root = fsdp_groups(mine, shared)
        shards = []
        for group in groups + ([root] if root else []):
            for ps in _by_dtype(group).values():
                numel, dtype = sum(_padded(p, k) for p in ps), ps[0].dtype
                traffic.add("all_gather_into_tensor", numel, dtype, k, dp_rank, times=1 if group is root else 2,
                            timed=False)
                traffic.add("reduce_scatter_tensor", numel + len(ps), dtype, k, dp_rank, timed=False)
            for p in group:
                rows = Shard.local_shard_size_and_offset(p.shape[0], k, dp_rank)[0]
                shards.append(_Param(p.index, (rows, *p.shape[1:]), p.dtype))
        return shards, sum(p.nbytes for p in shards), 0   # (the gathered parameters: in the blocks' peaks)
    for wrapped in modules:
        for bucket in assign_buckets([_Stand(p) for p in wrapped], BUCKET_BYTES):
            traffic.add("all_reduce", sum(wrapped[i].numel() for i in bucket), wrapped[bucket[0]].dtype, k, dp_rank)
    flat = held   # (DDP's buckets: a flat copy of every gradient, kept)
    if layout.shard == "ddp":
        return params, held, flat
    owner = {p.index: r for p, r in deal(params, [0] * k)}   # (ZeroRedundancyOptimizer's own partition)
    for p in params:
        traffic.add("broadcast", p.numel(), p.dtype, k, dp_rank, root=owner[p.index])
    return [p for p in params if owner[p.index] == dp_rank], held, flat
