"""What the planner knows of the machine: measured once, on the ranks that will train, at the shapes the plans use.

``measure`` runs on every rank of a process group of the world size being planned (a collective). It times

- each block of the model (and the loss, as one more block) at every (tensor-parallel degree, rows per
  micro-batch) a candidate plan would run it at: forward, the full backward, and the backward split into the
  input's gradient and the weights' (``autograd.split_backward``): each rank's median of a few runs, the slowest
  rank's.
  A tensor-parallel block is measured split over its ranks, its collectives included, and the bytes those
  collectives send are counted (``debug.sent_bytes``);
- the same blocks under ``tracemalloc`` (which numpy's buffers report to): what forward leaves live, the highest
  point above the start during forward and during backward, and the gradients backward leaves;
- the optimizer's step on each block's parameters (time, state bytes, its temporary peak);
- each collective the plans call, at a ladder of sizes, on groups of every size they use: the link's latency and
  bandwidth as the algorithms see them.

Everything comes back as plain numbers (``Profile``): rank 0's, sent to every rank, so that all predict alike.
"""
from __future__ import annotations

import contextlib
import copy
import statistics
import time
import tracemalloc
from dataclasses import dataclass, field

import numpy as np

import minidl
from minidl import nn

from .. import collectives, debug, objects, p2p
from ..device_mesh import init_device_mesh
from ..fsdp import fully_shard
from ..state import get_rank, get_world_size, new_group
from ..tensor import DTensor
from ..tensor.parallel import parallelize_module
from .blocks import LossBlock, block_plan, local, sharing

REPEATS = 7
LINK_SIZES = tuple(1 << p for p in range(8, 25, 2))       # 256 B .. 16 MiB, every factor of 4
LINKS = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "send")


@dataclass
class BlockCost:
    """One block at one (tensor-parallel degree, rows): seconds (the slowest rank's), bytes sent (per
    tensor-parallel rank), bytes held; ``params``: its parameters' (index in the model, local shape, dtype name),
    ``output``: the (shape, itemsize) of each tensor it passes on, ``inputs_float``: whether its inputs take
    gradients (a pipeline stage sends them back)."""
    forward: float
    backward: float
    input_grad: float
    weight_grad: float
    sent_forward: list
    sent_backward: list
    kept_for_weights: int = 0   # gradients a split backward keeps from its input pass to its weight pass
    held: int = 0
    forward_peak: int = 0
    backward_peak: int = 0
    grads: int = 0
    params: list = field(default_factory=list)
    output: list = field(default_factory=list)
    inputs_float: bool = False


@dataclass
class Profile:
    """``blocks[(tp, rows, fsdp)]``: a BlockCost per block (the loss last), or why the blocks cannot run so;
    ``links[(kind, k)]``: [(bytes, seconds)]; ``step``: the optimizer's (seconds per parameter, per element),
    ``state``: its state's (bytes per parameter, per parameter byte), ``step_peak``: its temporary peak per byte
    of the largest parameter."""
    blocks: dict
    links: dict
    step: tuple
    state: tuple
    step_peak: float
    world_size: int
    shared: set          # the blocks holding a parameter another block holds too (blocks.sharing)

    def link_seconds(self, kind, k, nbytes) -> float:
        """The time of one ``kind`` of ``nbytes`` on ``k`` ranks: the measured ladder, linear between rungs (and
        beyond the top on the last two)."""
        if k <= 1 or nbytes <= 0:
            return 0.0
        points = self.links[(kind, k)]
        sizes = [b for b, _ in points]
        if nbytes <= sizes[0]:
            return points[0][1]
        i = min(int(np.searchsorted(sizes, nbytes)), len(points) - 1)
        (b0, t0), (b1, t1) = points[i - 1], points[i]
        return t0 + (t1 - t0) * (nbytes - b0) / (b1 - b0)

    def latency_and_bandwidth(self, kind, k) -> tuple:
        """(seconds at the smallest size, bytes per second between the two largest): the link in two numbers."""
        points = self.links[(kind, k)]
        (b0, t0), (b1, t1) = points[-2], points[-1]
        return points[0][1], (b1 - b0) / max(t1 - t0, 1e-12)


# ------------------------------------------------------------------------------------------------ blocks
def _every(value) -> list:
    """Every rank's ``value``, in rank order."""
    found = [None] * get_world_size()
    objects.all_gather_object(found, value)
    return found


def _slowest(seconds) -> tuple:
    """Each of ``seconds`` (a tuple), the largest over the ranks (the slowest rank sets the pace)."""
    found = _every(tuple(seconds))
    return tuple(max(f[i] for f in found) for i in range(len(seconds)))


def _fresh(tensors, grad):
    """The inputs again, as leaves taking a gradient where ``grad`` and floating (a block's input but the
    model's: the real step computes no gradient of the batch)."""
    return tuple(t.detach().requires_grad_(grad and t.dtype.is_floating_point) for t in tensors)


def _float_outputs(outputs):
    return [o for o in outputs if o.requires_grad]


def _typical(runs) -> tuple:
    """The run of median total time: what a training step meets (a pipeline's micro-batches, a model's blocks
    one after another, find caches less warm than a block run again and again on the same data does; the
    fastest run is the least disturbed one, and short of a step's)."""
    return sorted(runs, key=sum)[len(runs) // 2]


def _run_once(block, inputs, split, group, grad):
    """(forward s, backward s, input-gradient s, weight-gradient s, sent in forward, sent in backward, outputs,
    bytes of the gradients the weight pass keeps from I to W) of one forward and backward; ``split``: the
    backward as split_backward's two halves (else whole)."""
    inputs = _fresh(inputs, grad)
    sent0, start = _sent(group), time.perf_counter()
    outputs = _as_tuple(block(*inputs))
    forward, sent1 = time.perf_counter() - start, _sent(group)
    floats = _float_outputs(outputs)
    grads = [minidl.ones_like(o) for o in floats]
    start = time.perf_counter()
    first = second = 0.0
    kept = 0
    if floats and split:
        wanted = [t for t in inputs if t.requires_grad]
        _, weight_pass = minidl.autograd.split_backward(floats, wanted, grads)
        first = time.perf_counter() - start
        kept = sum(g.numel() * g.element_size() for g in weight_pass.held_gradients)
        weight_pass()
        second = time.perf_counter() - start - first
    elif floats:
        minidl.autograd.backward(floats, grads)
    backward = time.perf_counter() - start
    return forward, backward, first, second, sent1 - sent0, _sent(group) - sent1, outputs, kept


def _sent(group) -> int:
    return 0 if group is None else debug.sent_bytes(group)


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


class _Bench:
    """One block at one shape, ready to run: the block (split and sharded as the shape says), its inputs, and
    its runs so far. ``group``: the tensor-parallel group whose bytes it counts (None: none); ``split``: also run
    its backward split in halves (not for a sharded block, which no pipeline runs); ``grad``: whether its inputs
    take a gradient (all but the model's own)."""

    def __init__(self, block, inputs, params, tp, group, split, grad):
        self.block, self.inputs, self.params, self.tp = block, inputs, params, tp
        self.group, self.split, self.grad = group, split, grad
        self.whole, self.halves, self.kept, self.sent = [], [], 0, (0, 0)

    def run(self):
        collectives.barrier()
        f, b, _, _, sent_f, sent_b, _, _ = _run_once(self.block, self.inputs, False, self.group, self.grad)
        self.whole.append((f, b))
        self.sent = (sent_f, sent_b)
        if self.split:
            collectives.barrier()
            found = _run_once(self.block, self.inputs, True, self.group, self.grad)
            self.halves.append(found[2:4])
            self.kept = found[-1]
        self.block.zero_grad(set_to_none=True)

    def cost(self, outputs) -> BlockCost:
        """The BlockCost of its runs: each rank's median, of those the slowest rank's; the bytes each
        tensor-parallel rank sent."""
        forward, backward = _slowest(_typical(self.whole))
        input_grad, weight_grad = _slowest(_typical(self.halves)) if self.split else (0.0, 0.0)
        sent = _every(self.sent)[:self.tp]
        return BlockCost(forward, backward, input_grad, weight_grad, [f for f, _ in sent], [b for _, b in sent],
                         kept_for_weights=self.kept, params=self.params,
                         output=[(tuple(o.shape), o.element_size()) for o in outputs],
                         inputs_float=any(t.dtype.is_floating_point for t in self.inputs))


def _param_list(block, names) -> list:
    """(index in the model's parameters, local shape, dtype name) of each of ``block``'s parameters."""
    return [(names[name], tuple(local(p).shape), p.dtype.name) for name, p in block.named_parameters()]


@contextlib.contextmanager
def _tracing():
    """tracemalloc on, started and stopped by all ranks together: ranks that are threads of one process (sim)
    share it, and stopping it while another thread allocates could crash the process."""
    collectives.barrier()
    tracemalloc.start()
    try:
        yield
    finally:
        collectives.barrier()
        tracemalloc.stop()


def _traced(cost, block, inputs, grad):
    """Fill ``cost``'s memory: bytes left live by forward, the peaks of forward and backward above their start,
    and the gradients' bytes (numpy's buffers under tracemalloc; on sim ranks, the threads' together)."""
    inputs = _fresh(inputs, grad)
    with _tracing():
        start = tracemalloc.get_traced_memory()[0]
        outputs = _as_tuple(block(*inputs))
        now, peak = tracemalloc.get_traced_memory()
        cost.held, cost.forward_peak = now - start, peak - start
        floats = _float_outputs(outputs)
        grads = [minidl.ones_like(o) for o in floats]
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        if floats:
            minidl.autograd.backward(floats, grads)
        cost.backward_peak = tracemalloc.get_traced_memory()[1] - before
    cost.grads = sum(local(p.grad).numel() * local(p).element_size() for p in block.parameters() if p.grad is not None)
    block.zero_grad(set_to_none=True)


def _prepared(blocks, loss_fn, sample, target, tp_plan, shape, names, shared) -> list:
    """[(a _Bench, its outputs)] per block (the loss last) at ``shape`` = (tp, rows, fsdp): ``rows`` rows of the
    sample, split over ``tp`` ranks, and under ``fully_shard`` over ``fsdp`` ranks (its gathers and
    reduce-scatters timed with it: on a CPU their copies cost as much as the messages), each block run once on
    what the one before gave (kernels compiled, caches warm). A block holding a parameter of another (``shared``)
    is one of the root's in a plan, whose parameters stay gathered from forward to backward; the others
    reshard."""
    tp, rows, fsdp = shape
    world = get_world_size()
    mesh = init_device_mesh("cpu", (world // (tp * fsdp), fsdp, tp), mesh_dim_names=("rest", "dp", "tp")) \
        if tp * fsdp > 1 else None
    x, found = tuple(t[:rows] for t in sample), []
    for i, block in enumerate(list(blocks) + [LossBlock(loss_fn, target[:rows])]):
        if mesh is not None:
            block = copy.deepcopy(block)
            plan = block_plan(tp_plan, i, block) if tp > 1 else None
            if plan:
                parallelize_module(block, mesh["tp"], plan)
        params = _param_list(block, names[i])
        if fsdp > 1 and params:   # (inside a root, as in the plan)
            fully_shard(block, mesh=mesh["dp"], reshard_after_forward=i not in shared)
            block = fully_shard(nn.Sequential(block), mesh=mesh["dp"])
        bench = _Bench(block, x, params, tp, mesh["tp"].get_group() if tp > 1 else None, fsdp == 1, i > 0)
        try:
            outputs = _run_once(block, x, False, bench.group, bench.grad)[6]
        except Exception as e:
            raise RuntimeError(f"child {i} ({type(block).__name__}) at {rows} rows, tensor parallel over {tp}, "
                               f"fully sharded over {fsdp}: {e}") from e
        block.zero_grad(set_to_none=True)
        found.append((bench, outputs))
        x = tuple((o.to_local() if isinstance(o, DTensor) else o).detach() for o in outputs)
    return found


def _blocks(prepared) -> dict:
    """{shape: [BlockCost per block]}: REPEATS rounds, each running every block at every shape once (so that the
    machine's drift during the measurement falls on all shapes alike), then each traced once."""
    for _ in range(REPEATS):
        for benches in prepared.values():
            for bench, _ in benches:
                bench.run()
    found = {}
    for shape, benches in prepared.items():
        found[shape] = []
        for bench, outputs in benches:
            cost = bench.cost(outputs)
            _traced(cost, bench.block, bench.inputs, bench.grad)
            found[shape].append(cost)
    return found


# ------------------------------------------------------------------------------------------------ optimizer
def _optimizer(blocks, optimizer_class, optimizer_kwargs):
    """Fits of the optimizer's step time and state bytes (per parameter, per element / byte) over the blocks, and
    its temporary peak per byte of the block's largest parameter (the highest over the blocks)."""
    rows, times, states, peaks = [], [], [], []
    for block in blocks:
        params = [p for p in block.parameters() if p.requires_grad]
        if not params:
            continue
        clones = [minidl.nn.Parameter(p.detach().clone()) for p in params]
        for c in clones:
            c.grad = minidl.ones_like(c)
        opt = optimizer_class(clones, **optimizer_kwargs)
        opt.step()   # (state made, kernels warm)
        seconds = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            opt.step()
            seconds.append(time.perf_counter() - start)
        with _tracing():
            before = tracemalloc.get_traced_memory()[0]
            opt.step()
            peak = tracemalloc.get_traced_memory()[1] - before
        nbytes = sum(c.numel() * c.element_size() for c in clones)
        state = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
                    if isinstance(v, minidl.Tensor))
        rows.append((len(clones), nbytes))
        times.append(statistics.median(seconds))
        states.append(state)
        peaks.append(peak / max(c.numel() * c.element_size() for c in clones))
    a = np.array(rows, dtype=float)
    return _fit(a, np.array(times)), _fit(a, np.array(states, dtype=float)), max(peaks)


def _fit(a, values) -> tuple:
    """(per parameter, per element or byte) fitting ``values`` over the rows of ``a``, neither negative: least
    squares, or through the origin on one column where the two-column fit gives a negative part."""
    both = np.linalg.lstsq(a, values, rcond=None)[0] if len(a) > 1 else np.array([-1.0, -1.0])
    if (both >= 0).all():
        return float(both[0]), float(both[1])
    alone = [max(0.0, float(a[:, c] @ values / (a[:, c] @ a[:, c]))) for c in (0, 1)]
    error = [np.sum((values - alone[c] * a[:, c]) ** 2) for c in (0, 1)]
    return (alone[0], 0.0) if error[0] < error[1] else (0.0, alone[1])


# ------------------------------------------------------------------------------------------------ links
def _link(kind, k, nbytes, group, partner):
    """This rank's median seconds of ``kind`` of ``nbytes`` on ``group`` (``k`` ranks)."""
    numel = max(1, nbytes // 4)
    t = minidl.zeros(numel)
    big = minidl.zeros(numel * k)
    me = group.rank
    seconds = []
    for _ in range(REPEATS + 1):
        collectives.barrier(group=group)
        start = time.perf_counter()
        if kind == "all_reduce":
            collectives.all_reduce(t, group=group)
        elif kind == "all_gather_into_tensor":
            collectives.all_gather_into_tensor(big, t, group=group)
        elif kind == "reduce_scatter_tensor":
            collectives.reduce_scatter_tensor(t, big, group=group)
        elif kind == "broadcast":
            collectives.broadcast(t, src=group.ranks[0], group=group)
        elif me % 2 == 0:   # send: one way, timed on the pair's receiver and sender alike (a ping-pong, halved)
            p2p.send(t, partner, group=group)
            p2p.recv(t, partner, group=group)
        else:
            p2p.recv(t, partner, group=group)
            p2p.send(t, partner, group=group)
        seconds.append((time.perf_counter() - start) / (2 if kind == "send" else 1))
    return statistics.median(seconds[1:])


def _links(group_sizes) -> dict:
    """[(bytes, seconds)] per (collective, group size), each the slowest rank's: the ranks in groups of k
    consecutive ones, all measuring at once (as a plan's groups communicate at once); where k does not divide
    the world, the ranks left over wait."""
    found, world, me = {}, get_world_size(), get_rank()
    for k in group_sizes:
        groups = [new_group(list(range(s, s + k))) for s in range(0, world - world % k, k)]
        mine = groups[me // k] if me < len(groups) * k else None
        for kind in LINKS:
            if kind == "send" and k % 2:
                continue
            partner = mine.ranks[mine.rank ^ 1] if kind == "send" and mine is not None else None
            found[(kind, k)] = [(n, _slowest((_link(kind, k, n, mine, partner) if mine else 0.0,))[0])
                                for n in LINK_SIZES]
    return found


# ------------------------------------------------------------------------------------------------ all
def parameter_indices(blocks) -> list:
    """Per block, {its parameter's name: the parameter's index among the model's} (a tied parameter, in two
    blocks, has one index)."""
    index, found = {}, []
    for block in blocks:
        found.append({name: index.setdefault(id(p), len(index)) for name, p in block.named_parameters()})
    return found


def measure(blocks, sample, target, loss_fn, tp_plan, shapes, group_sizes, optimizer_class, optimizer_kwargs):
    """The Profile of ``blocks`` (a list of modules whose chain is the model), on the default process group:
    ``shapes``, the (tensor-parallel degree, rows, fully_shard degree) to measure the blocks at; ``group_sizes``,
    the group sizes to measure the links on. A collective: every rank calls it with the same arguments."""
    names, shared = parameter_indices(blocks) + [{}], sharing(blocks)
    prepared, failures = {}, {}
    for shape in sorted(shapes):
        try:
            prepared[shape] = _prepared(blocks, loss_fn, sample, target, tp_plan, shape, names, shared)
            failed = None
        except Exception as e:   # (a split the model does not take: every rank fails alike, before talking)
            if shape[0] == 1 and shape[2] == 1:
                raise
            failed = str(e)
        failed = next((f for f in _every(failed) if f is not None), None)
        if failed is not None:
            prepared.pop(shape, None)
            failures[shape] = failed
    costs = {**_blocks(prepared), **failures}
    step, state, step_peak = _optimizer(blocks, optimizer_class, optimizer_kwargs)
    found = [Profile(costs, _links(group_sizes), step, state, step_peak, get_world_size(), shared)]
    objects.broadcast_object_list(found, src=0)   # (rank 0's: every rank then predicts, and chooses, alike)
    return found[0]
