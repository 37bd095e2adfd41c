"""The collectives of torch.distributed, in place on minidl tensors: argument checks (naming
the collective), tensors to flat buffers, the algorithm run on the group's communication
thread, results written back. async_op=True returns a Work; otherwise they return None.
Ranks (src, dst) are global ranks, as in torch.distributed; on a rank outside ``group`` the
calls do nothing.
"""
from __future__ import annotations

import numpy as np

from .. import _bfloat16
from . import algorithms
from .communicators.base import DistError
from .descriptor import describe
from .reduce_op import ReduceOp
from .state import resolve
from .tensors import Writable, check_like, check_tensor, check_tensor_list, read


def _described(g, what: str, array, op=None, root=None):
    """The descriptor of collective ``what`` on ``array`` (the rank's own buffer)."""
    return describe(what, algorithms.native_or_ours(g.coll, what, g.config.algorithm), array.size, array.dtype,
                    op, root)


def _check_op(op, array, what: str) -> ReduceOp:
    if not isinstance(op, ReduceOp):
        raise TypeError(f"{what}: op must be a minidl.dist.ReduceOp, got {op!r}")
    bfloat16 = array.dtype == _bfloat16.BITS  # (minidl's only uint16 buffers)
    if bfloat16 and not isinstance(array, np.ndarray):
        raise TypeError(f"{what}: bfloat16 device tensors cannot be reduced yet; reduce a float32 copy "
                        f"(tensor.float()) and copy it back")
    if op.divides and array.dtype.kind != "f" and not bfloat16:
        raise TypeError(f"{what}: ReduceOp.AVG needs a floating-point tensor, got {array.dtype}")
    return op


def _finish_avg(array, op, size):
    if op.divides:
        np.true_divide(array, size, out=array)


# bfloat16 is reduced in float32 and rounded once at the end: numpy's ufuncs would combine its bits
# as integers (the messages are then twice the size)
def _widened(array):
    """The array the algorithms reduce: ``array`` itself, or bfloat16's values in float32."""
    return _bfloat16.to_float32(array) if array.dtype == _bfloat16.BITS else array


def _store(dst, work) -> None:
    """The reduced ``work`` into ``dst`` (rounded back to bfloat16 where ``dst`` holds bits)."""
    if work is not dst:
        dst[...] = _bfloat16.from_values(work) if dst.dtype == _bfloat16.BITS else work


def all_reduce_buffer(array, op=ReduceOp.SUM, group=None, async_op=False):
    """all_reduce on a contiguous 1-D array of the backend's device, in place (a gradient bucket):
    no tensor wrapping and no version bump."""
    what = "all_reduce"
    g = resolve(group, what)
    if g is None:
        return None
    if getattr(array, "ndim", None) != 1 or not array.flags.c_contiguous:  # numpy, or cupy under nccl
        raise ValueError(f"{what}: expected a contiguous 1-D array, got {type(array).__name__}")
    return _all_reduce(g, array, _check_op(op, array, what), async_op, None, None)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    what = "all_reduce"
    g = resolve(group, what)
    if g is None:
        return None
    out = Writable(check_tensor(tensor, what, g.config.backend), what)
    return _all_reduce(g, out.array, _check_op(op, out.array, what), async_op, out, tensor)


def _all_reduce(g, array, op, async_op, out, tensor):
    """``out``: the Writable whose ``array`` this is, if any."""
    def job(ch):
        work = _widened(array)
        path = algorithms.all_reduce_path(ch.comm, work.nbytes, g.config, g.hierarchy)
        descriptor = describe("all_reduce", path, array.size, array.dtype, op)
        if path == "recursive_doubling" and isinstance(work, np.ndarray) and work.nbytes <= g.config.small_bytes:
            g.agree(ch, descriptor, work, op.combining)  # the data rides in the agreement's messages
        else:
            g.agree(ch, descriptor)
            algorithms.all_reduce(ch, work, op.combining, path, g.config, g.hierarchy)
        _finish_avg(work, op, g.size)
        _store(array, work)
        if out is not None:
            out.commit()
    # the fingerprint only when debugging: small all-reduces are mostly Python like this dict
    fingerprint = dict(tensor=tensor, op=op, numel=array.size) if g.config.debug else None
    return g.submit("all_reduce", job, async_op, None, fingerprint)


def broadcast(tensor, src, group=None, async_op=False):
    what = "broadcast"
    g = resolve(group, what)
    if g is None:
        return None
    root = g.group_rank(src, what, "src")
    out = Writable(check_tensor(tensor, what, g.config.backend), what)

    def job(ch):
        algorithms.broadcast(ch, out.array, root, g.config.algorithm)
        if g.rank != root:
            out.commit()
    return g.submit(what, job, async_op, _described(g, what, out.array, root=root), dict(tensor=tensor, src=src))


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False):
    what = "reduce"
    g = resolve(group, what)
    if g is None:
        return None
    root = g.group_rank(dst, what, "dst")
    out = Writable(check_tensor(tensor, what, g.config.backend), what)
    op = _check_op(op, out.array, what)

    def job(ch):
        work = _widened(out.array)
        algorithms.reduce(ch, work, op.combining, root, g.config.algorithm)
        if g.rank == root:
            _finish_avg(work, op, g.size)
            _store(out.array, work)
            out.commit()
    return g.submit(what, job, async_op, _described(g, what, out.array, op, root), dict(tensor=tensor, op=op, dst=dst))


def _blocks(tensors):
    """A (len, numel) array holding the tensors' elements, one row each."""
    blocks = np.empty_like(read(tensors[0]), shape=(len(tensors), tensors[0].numel()))  # on their device
    for row, t in zip(blocks, tensors):
        row[...] = read(t)
    return blocks


def all_gather(tensor_list, tensor, group=None, async_op=False):
    what = "all_gather"
    g = resolve(group, what)
    if g is None:
        return None
    check_tensor(tensor, what, g.config.backend)
    for i, t in enumerate(check_tensor_list(tensor_list, what, g.config.backend, "tensor_list", g.size)):
        check_like(t, tensor, what, f"tensor_list[{i}]", "tensor")
    outs = [Writable(t, what) for t in tensor_list]
    blocks = np.empty_like(outs[0].array, shape=(g.size, tensor.numel()))  # on the tensors' device
    blocks[g.rank] = read(tensor)

    def job(ch):
        algorithms.all_gather(ch, blocks, g.config.algorithm, g.config.segment_bytes)
        for out, row in zip(outs, blocks):
            out.array[...] = row
            out.commit()
    return g.submit(what, job, async_op, _described(g, what, blocks[g.rank]), dict(tensor=tensor))


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    what = "reduce_scatter"
    g = resolve(group, what)
    if g is None:
        return None
    out = Writable(check_tensor(output, what, g.config.backend, "output"), what)
    for i, t in enumerate(check_tensor_list(input_list, what, g.config.backend, "input_list", g.size)):
        check_like(t, output, what, f"input_list[{i}]", "output")
    return _reduce_scattered(g, what, _blocks(input_list), out, _check_op(op, out.array, what), output, async_op)


def _reduce_scattered(g, what, blocks, out, op, output, async_op):
    """The ring's reduce-scatter of the (size, n) ``blocks`` (which it overwrites), row ``rank`` into ``out``."""
    def job(ch):
        work = _widened(blocks)
        algorithms.reduce_scatter(ch, work, op.combining, g.config.segment_bytes)
        mine = work[g.rank]
        _finish_avg(mine, op, g.size)
        _store(out.array, mine)
        out.commit()
    return g.submit(what, job, async_op, _described(g, what, out.array, op), dict(tensor=output, op=op))


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Every rank's ``input_tensor`` into ``output_tensor``, rank after rank along its first dimension (or its
    flat elements): the ring writes straight into it, with no list of outputs to copy into."""
    what = "all_gather_into_tensor"
    g = resolve(group, what)
    if g is None:
        return None
    check_tensor(input_tensor, what, g.config.backend, "input_tensor")
    out = Writable(check_tensor(output_tensor, what, g.config.backend, "output_tensor"), what)
    _check_dtype(output_tensor, input_tensor, what)
    if out.array.size != g.size * input_tensor.numel():
        raise ValueError(f"{what}: output_tensor holds {out.array.size} elements; {g.size} ranks' input_tensor "
                         f"of {input_tensor.numel()} need {g.size * input_tensor.numel()}")
    blocks = out.array.reshape(g.size, input_tensor.numel())
    blocks[g.rank] = read(input_tensor)

    def job(ch):
        algorithms.all_gather(ch, blocks, g.config.algorithm, g.config.segment_bytes)
        out.commit()
    return g.submit(what, job, async_op, _described(g, what, blocks[g.rank]), dict(tensor=input_tensor))


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """``input`` (every rank's, ``size`` blocks of ``output``'s size one after another) reduced across ranks, block
    r into rank r's ``output``."""
    what = "reduce_scatter_tensor"
    g = resolve(group, what)
    if g is None:
        return None
    out = Writable(check_tensor(output, what, g.config.backend, "output"), what)
    check_tensor(input, what, g.config.backend, "input")
    _check_dtype(output, input, what)
    if input.numel() != g.size * output.numel():
        raise ValueError(f"{what}: input holds {input.numel()} elements; {g.size} ranks' blocks of output's "
                         f"{output.numel()} need {g.size * output.numel()}")
    blocks = read(input).reshape(g.size, output.numel()).copy()   # (the ring leaves partial sums in the others)
    return _reduce_scattered(g, what, blocks, out, _check_op(op, out.array, what), output, async_op)


def _check_dtype(a, b, what) -> None:
    if a.dtype != b.dtype:
        raise TypeError(f"{what}: the tensors' dtypes differ ({a.dtype} and {b.dtype})")


def _root_list(tensors, tensor, g, root, what, name):
    """The list argument of gather/scatter: required on the root, refused elsewhere."""
    if g.rank != root:
        if tensors:
            raise ValueError(f"{what}: {name} must not be given on rank {g.ranks[g.rank]}, only on the root "
                             f"(rank {g.ranks[root]})")
        return None
    if tensors is None:
        raise ValueError(f"{what}: {name} is required on the root (rank {g.ranks[root]})")
    for i, t in enumerate(check_tensor_list(tensors, what, g.config.backend, name, g.size)):
        check_like(t, tensor, what, f"{name}[{i}]", "tensor")
    return tensors


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    what = "gather"
    g = resolve(group, what)
    if g is None:
        return None
    root = g.group_rank(dst, what, "dst")
    send = read(check_tensor(tensor, what, g.config.backend)).copy()
    targets = _root_list(gather_list, tensor, g, root, what, "gather_list")
    outs = [Writable(t, what) for t in targets or ()]

    def job(ch):
        algorithms.gather(ch, send, [o.array for o in outs], root)
        for o in outs:
            o.commit()
    return g.submit(what, job, async_op, _described(g, what, send, root=root), dict(tensor=tensor, dst=dst))


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
    what = "scatter"
    g = resolve(group, what)
    if g is None:
        return None
    root = g.group_rank(src, what, "src")
    out = Writable(check_tensor(tensor, what, g.config.backend), what)
    sources = _root_list(scatter_list, tensor, g, root, what, "scatter_list")
    blocks = None if sources is None else _blocks(sources)

    def job(ch):
        algorithms.scatter(ch, blocks, out.array, root)
        out.commit()
    return g.submit(what, job, async_op, _described(g, what, out.array, root=root), dict(tensor=tensor, src=src))


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
    what = "all_to_all"
    g = resolve(group, what)
    if g is None:
        return None
    check_tensor_list(output_tensor_list, what, g.config.backend, "output_tensor_list", g.size)
    check_tensor_list(input_tensor_list, what, g.config.backend, "input_tensor_list", g.size)
    dtypes = {t.dtype for t in (*output_tensor_list, *input_tensor_list)}
    if len(dtypes) > 1:
        raise ValueError(f"{what}: all tensors must have one dtype, got {sorted(d.name for d in dtypes)}")
    sends = [read(t).copy() for t in input_tensor_list]
    outs = [Writable(t, what) for t in output_tensor_list]

    def job(ch):
        _check_pairs(ch, g, [s.size for s in sends], [o.array.size for o in outs])
        algorithms.all_to_all(ch, sends, [o.array for o in outs])
        for o in outs:
            o.commit()
    return g.submit(what, job, async_op, describe(what, dtype=sends[0].dtype), dict(dtype=next(iter(dtypes)).name))


def _check_pairs(ch, g, send_sizes, recv_sizes) -> None:
    """all_to_all's sizes may differ pair by pair: every rank gathers every rank's (sent, expected)
    sizes, so all of them find the same mismatches and raise the same error."""
    sizes = np.zeros((g.size, 2 * g.size), np.int64)
    sizes[g.rank] = send_sizes + recv_sizes
    algorithms.all_gather(ch, sizes, "auto")
    n = g.size
    wrong = [f"rank {g.ranks[i]} sends {sizes[i, j]} elements to rank {g.ranks[j]}, which expects {sizes[j, n + i]}"
             for i in range(n) for j in range(n) if sizes[i, j] != sizes[j, n + i]]
    if wrong:
        raise DistError(f"{ch.what}: the ranks' tensor lists don't match pair by pair: " + "; ".join(wrong))


def barrier(group=None, async_op=False, device_ids=None):
    what = "barrier"
    g = resolve(group, what)
    if g is None:
        return None
    return g.submit(what, lambda ch: algorithms.barrier(ch, g.config.algorithm), async_op,
                    describe(what, algorithms.native_or_ours(g.coll, what, g.config.algorithm)))
