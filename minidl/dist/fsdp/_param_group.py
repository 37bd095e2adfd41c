"""A communication group of ``fully_shard``: the parameters one call sharded, gathered and reduced together.

Each parameter is kept as this rank's rows (``chunk``'s split of dim 0 over the data-parallel ranks), a
``Shard(0)`` DTensor parameter the optimizer steps. For a forward the group all-gathers every shard in one
collective per dtype (each rank's rows padded to the largest, as a collective needs equal blocks) and puts the
full tensors on the modules; they are outputs of one autograd node (``_AllGathered``) whose backward gets all
their gradients at once and reduce-scatters them to the shards. Between forward and backward the full tensors'
memory is given back (their storages emptied, as torch empties them with ``resize_(0)``) and, when the gradient
reaches the module's outputs (``_BeforeBackward``), gathered again into the same storages, so the tensors
autograd saved read the right values. A parameter that tensor parallelism already split is sharded the same
way over its local piece: the full tensor is then the piece, put on the module as the DTensor it was.
"""
from __future__ import annotations

import math
import weakref

from ..._tensor import Tensor
from ...autograd.engine import queue_callback
from ...autograd.function import Function
from ...autograd.grad_mode import is_grad_enabled, no_grad
from ...nn.parameter import Parameter
from ...ops.creation import empty, tensor, zeros
from ...ops.shape_ops import cat
from .. import collectives
from ..reduce_op import ReduceOp
from ..tensor._api import DTensor
from ..tensor._spec import DTensorSpec
from ..tensor.placement_types import Replicate, Shard, _is_shard_like, _StridedShard


class FSDPParam:
    """One sharded parameter: the (module, name) places that hold it, its rows on each rank, and the tensor
    parallel layout of its full value (None for a plain parameter)."""

    def __init__(self, param, locations, mesh, offload):
        self.locations, self.original = locations, weakref.ref(param)   # (a tie found later: not kept alive)
        self.tp_spec = param._spec if isinstance(param, DTensor) else None
        whole = param._local_tensor if self.tp_spec is not None else param
        name = _named(self)
        if whole.ndim == 0:
            raise ValueError(f"fully_shard: the parameter {name} is a scalar (0-dim); FSDP shards dim 0 of every "
                             f"parameter: make it 1-dim, or pass it in ignored_params")
        k, me = mesh.size(-1), mesh.get_local_rank(-1)
        self.shape = tuple(whole.shape)          # (what the module computes with: the whole, or the TP piece)
        self.inner = math.prod(self.shape[1:])
        self.rows = [Shard.local_shard_size_and_offset(self.shape[0], k, r) for r in range(k)]
        size, start = self.rows[me]
        with no_grad():
            local = whole.detach().narrow(0, start, size).clone()
            if offload:
                local = local.to("cpu")
        spec = DTensorSpec(*_sharded_layout(param, mesh, name))
        self.sharded = Parameter(DTensor(local, spec), requires_grad=param.requires_grad)

    @property
    def local(self):
        """This rank's rows: the leaf the optimizer steps and the gradients reach."""
        return self.sharded._local_tensor

    def padded_rows(self) -> int:
        return self.rows[0][0]

    def padded_flat(self, t, rows: int):
        """``t`` (this parameter's rows ``rows`` long) flattened and padded with zeros to the largest shard."""
        missing = (self.padded_rows() - rows) * self.inner
        flat = t.reshape(-1)
        if missing == 0:
            return flat
        return cat([flat, zeros(missing, dtype=t.dtype, device=t.device)])

    def install(self, value) -> None:
        """Put ``value`` (a full tensor, or the shard parameter) on every module that holds this parameter."""
        if self.tp_spec is not None and not isinstance(value, DTensor):
            value = DTensor(value, self.tp_spec)
        for module, name in self.locations:
            module._parameters[name] = value


def _sharded_layout(param, mesh, name) -> tuple:
    """(mesh, placements, global shape) of the shard parameter: Shard(0) over the data-parallel mesh (after a
    Replicate on a 2-D HSDP mesh); for a tensor-parallel DTensor, the data-parallel placement before its own
    on the mesh both were cut from — a _StridedShard where tensor parallelism split dim 0 already (this rank's
    rows are then a part of its tensor-parallel piece, not of the whole)."""
    dp = (Replicate(), Shard(0)) if mesh.ndim == 2 else (Shard(0),)
    if not isinstance(param, DTensor):
        return mesh, dp, tuple(param.shape)
    tp_mesh, placements = param.device_mesh, tuple(param.placements)
    if tp_mesh._root is not mesh._root or set(tp_mesh._root_dims) & set(mesh._root_dims):
        raise ValueError(f"fully_shard: the parameter {name} is a DTensor on {tp_mesh}, which is not a dimension "
                         f"of the same mesh as the data-parallel {mesh} beside it (cut both from one "
                         f"init_device_mesh, e.g. mesh['dp'] and mesh['tp'])")
    if max(mesh._root_dims) > min(tp_mesh._root_dims):
        raise ValueError(f"fully_shard: the data-parallel mesh dimensions must come before the tensor-parallel "
                         f"ones of {name}'s mesh (got data-parallel {mesh._root_dims}, tensor-parallel "
                         f"{tp_mesh._root_dims} of the root mesh)")
    if any(p.is_partial() or (_is_shard_like(p) and type(p) is not Shard) for p in placements):
        raise ValueError(f"fully_shard: the parameter {name} is placed {placements}; FSDP shards parameters that "
                         f"tensor parallelism placed with Shard or Replicate only")
    split0 = math.prod(tp_mesh.size(d) for d, p in enumerate(placements) if p.is_shard(0))
    if split0 > 1:
        dp = dp[:-1] + (_StridedShard(0, split_factor=split0),)
    both = mesh._with_root_dims(mesh._root_dims + tp_mesh._root_dims)
    return both, dp + placements, tuple(param.shape)


class ParamGroup:
    """The parameters one ``fully_shard`` call manages, and what happens to them around forward and backward."""

    def __init__(self, params, mesh, mp_policy, offload, reshard_after_forward):
        self.params, self.mesh, self.mp, self.offload = params, mesh, mp_policy, offload
        self.reshard_after_forward = reshard_after_forward
        self.shard_group = mesh.get_group(mesh.ndim - 1)
        self.replicate_group = mesh.get_group(0) if mesh.ndim == 2 else None
        self.requires_gradient_sync = True
        self.divide_factor = None                 # (None: the mean over the data-parallel ranks)
        self.forward_prefetch, self.backward_prefetch = [], []
        self.pending = None                       # (a started all-gather: a prefetch, or unshard(); and the
        self.pending_versions = None              # shards' versions it read: a step since makes it stale)
        self.last = None                          # (the full tensors of the latest forward)
        self.unsynced = None                      # (full gradients summed while gradient sync is off)
        self.finishing = False

    # -- all-gather -------------------------------------------------------------------------------
    def start_gather(self) -> None:
        """Start the all-gather of the shards (one collective per dtype), unless one is under way."""
        if self.pending is not None:
            return
        meta = [p for p in self.params if p.local.is_meta]
        if meta:
            raise RuntimeError(f"fully_shard: {_named(meta[0])} is on the meta device (shapes, no data): "
                               f"materialise the model first (module.to_empty(device=...), then "
                               f"reset_parameters() on its modules)")
        self.pending_versions = [p.local._version for p in self.params]
        buckets = {}
        for p in self.params:
            buckets.setdefault(self.mp.param_dtype or p.local.dtype, []).append(p)
        started = []
        with no_grad():
            for dtype, ps in buckets.items():
                flat = cat([p.padded_flat(p.local.detach().to(dtype), p.local.shape[0]) for p in ps])
                gathered = empty(self.shard_group.size, flat.numel(), dtype=dtype, device=flat.device)
                work = collectives.all_gather_into_tensor(gathered, flat, group=self.shard_group, async_op=True)
                started.append((ps, gathered, work))
        self.pending = started

    def take_gathered(self) -> list:
        """The full tensors (fresh, contiguous), in parameter order, from the all-gather under way or a new one."""
        if self.pending is not None and self.pending_versions != [p.local._version for p in self.params]:
            self._drop_pending()   # (gathered before an optimizer step, for a module that did not run then)
        self.start_gather()
        started, self.pending = self.pending, None
        full = {}
        with no_grad():
            for ps, blocks, work in started:
                work.wait()
                at = 0
                for p in ps:
                    pieces = [blocks[r].narrow(0, at, rows * p.inner).view(rows, *p.shape[1:])
                              for r, (rows, _) in enumerate(p.rows)]
                    value = cat(pieces)
                    full[id(p)] = value if self.offload is None else value.to(self.mesh.device_type)
                    at += p.padded_rows() * p.inner
        return [full[id(p)] for p in self.params]

    # -- reduce-scatter ---------------------------------------------------------------------------
    def reduce_gradients(self, params, grads) -> list:
        """Each full gradient (None: none reached it here) summed over the ranks, divided by the data-parallel
        size (or the divide factor), in the reduce dtype; this rank's rows come back in the shard's dtype —
        None only where no rank had a gradient (each block carries a flag per parameter, summed with it)."""
        reduce_dtype = self.mp.reduce_dtype or self.mp.param_dtype
        k, me = self.shard_group.size, self.shard_group.rank
        factor = self.divide_factor or k * (1 if self.replicate_group is None else self.replicate_group.size)
        buckets = {}
        for p, g in zip(params, grads):
            buckets.setdefault(reduce_dtype or p.local.dtype, []).append((p, g))
        out = {}
        with no_grad():
            for dtype, pairs in buckets.items():
                flags = tensor([float(g is not None) for _, g in pairs], dtype=dtype, device=pairs[0][0].local.device)
                blocks = cat([piece for r in range(k) for piece in
                              [p.padded_flat(_rows_of(p, g, r, dtype), p.rows[r][0]) for p, g in pairs] + [flags]])
                mine = empty(blocks.numel() // k, dtype=dtype, device=blocks.device)
                collectives.reduce_scatter_tensor(mine, blocks, ReduceOp.SUM, group=self.shard_group)
                if self.replicate_group is not None:
                    collectives.all_reduce(mine, ReduceOp.SUM, group=self.replicate_group)
                reached = mine[-len(pairs):].tolist()
                mine = mine[:-len(pairs)] / factor
                at = 0
                for (p, g), anywhere in zip(pairs, reached):
                    rows = p.rows[me][0]
                    if anywhere:
                        piece = mine.narrow(0, at, rows * p.inner).view(rows, *p.shape[1:])
                        out[id(p)] = piece.to(dtype=p.local.dtype, device=p.local.device)
                    at += p.padded_rows() * p.inner
        return [out.get(id(p)) for p in params]

    # -- around forward and backward --------------------------------------------------------------
    def unshard_for_forward(self) -> "Unsharded":
        """The full parameters for a forward, on the modules: one autograd node from the shards."""
        call = Unsharded(self, self.take_gathered())
        call.trainable = [i for i, p in enumerate(self.params) if p.local.requires_grad]
        if call.trainable:   # (frozen parameters are gathered, never reduced)
            gathered = _AllGathered.apply(call, *[self.params[i].local for i in call.trainable])
            for i, full in zip(call.trainable, gathered):
                call.fulls[i] = full
        for p, full in zip(self.params, call.fulls):
            p.install(full)
        self.last = call
        for module in self.forward_prefetch:
            module._fsdp_group.start_gather()
        return call

    def reshard_after(self, call, output):
        """After a forward: the shard parameters back on the modules; the full ones freed unless kept for
        backward; the outputs marked so that backward gathers them again first."""
        for p in self.params:
            p.install(p.sharded)
        shared = set(map(id, call.storages))
        output = _map_tensors(output, lambda t: t.clone() if id(t.untyped_storage()) in shared else t)
        call.fulls = None
        if self.reshard_after_forward or not is_grad_enabled():
            call.free()
        if is_grad_enabled():
            tensors = [t for t in _tensors(output) if t.requires_grad]
            if tensors:
                marked = dict(zip(map(id, tensors), _BeforeBackward.apply(self, call, *tensors)))
                output = _map_tensors(output, lambda t: marked.get(id(t), t))
        return output

    def before_backward(self, call) -> None:
        if call.freed:
            call.refill(self.take_gathered())
        for module in self.backward_prefetch:
            group = module._fsdp_group
            if group.last is not None and group.last.freed:
                group.start_gather()
        if not self.finishing:
            self.finishing = True
            queue_callback(self._finish_backward)

    def after_backward(self, call, grads) -> list:
        """The trainable full parameters' gradients: the shards' (reduce-scattered), or kept while sync is off."""
        summed = {i: _added(g, self.unsynced.get(i) if self.unsynced else None) for i, g in zip(call.trainable, grads)}
        call.free()
        if not self.requires_gradient_sync:
            self.unsynced = summed
            return [None] * len(grads)
        self.unsynced = None
        return self.reduce_gradients([self.params[i] for i in call.trainable], [summed[i] for i in call.trainable])

    def _finish_backward(self) -> None:
        self.finishing = False
        if self.last is not None:
            self.last.free()

    def _drop_pending(self) -> None:
        for _, _, work in self.pending:
            work.wait()   # (every rank started it: it completes, unused)
        self.pending = None

    def reshard(self) -> None:
        """Drop any gathered or kept full parameters; the shards back on the modules."""
        if self.pending is not None:
            self._drop_pending()
        for p in self.params:
            p.install(p.sharded)
        if self.last is not None:
            self.last.free()


def _named(p) -> str:
    module, name = p.locations[0]
    return f"{type(module).__name__}.{name}"


def _added(a, b):
    return a if b is None else b if a is None else a + b


def _rows_of(p, g, r, dtype):
    """Rank r's rows of the full gradient ``g`` in ``dtype`` (zeros where no gradient reached it)."""
    rows, start = p.rows[r]
    if g is None:
        return zeros(rows, *p.shape[1:], dtype=dtype, device=p.local.device)
    return g.narrow(0, start, rows).to(dtype=dtype, device=p.local.device)


class Unsharded:
    """The full tensors of one forward of a group. ``free`` empties their storages (torch's ``resize_(0)``)
    and moves their version on, so that autograd refuses a saved full tensor read while freed (a parameter that
    reached the loss other than through the module's outputs, which no gradient there gathers again) rather
    than reading nothing; ``refill`` puts gathered values back into the same storages, which the tensors autograd
    saved share, at the version they were saved at."""

    def __init__(self, group, fulls):
        self.group, self.fulls, self.freed, self.trainable = group, fulls, False, []
        self.storages = [t.untyped_storage() for t in fulls]   # (kept after forward; the tensors are not: they
        # hold the autograd node that holds this, a cycle that would keep a step's gradients until a collection)

    def free(self) -> None:
        if not self.freed:
            for storage in self.storages:
                storage.buf = storage.buf[:0].copy()
                storage.version += 1
            self.freed = True

    def refill(self, gathered) -> None:
        for storage, new in zip(self.storages, gathered):
            storage.buf = new.untyped_storage().buf
            storage.version -= 1
        self.freed = False


class _AllGathered(Function):
    """The full parameters from the shards (gathered before); backward: their gradients to the shards."""

    @staticmethod
    def forward(ctx, call, *shards):
        ctx.call = call
        ctx.set_materialize_grads(False)
        return tuple(call.fulls[i] for i in call.trainable)

    @staticmethod
    def backward(ctx, *grads):
        return (None, *ctx.call.group.after_backward(ctx.call, grads))


class _BeforeBackward(Function):
    """The module's outputs, unchanged; backward: the group's full parameters gathered again (when freed) before
    the gradient goes into the module."""

    @staticmethod
    def forward(ctx, group, call, *outputs):
        ctx.group, ctx.call = group, call
        ctx.set_materialize_grads(False)
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        ctx.group.before_backward(ctx.call)
        return (None, None, *grads)


def _tensors(tree) -> list:
    found = []
    _map_tensors(tree, lambda t: found.append(t) or t)
    return found


def _map_tensors(tree, fn):
    """``tree`` (tensors in tuples, lists and dicts) with ``fn`` applied to each tensor, in order."""
    if isinstance(tree, Tensor):
        return fn(tree)
    if isinstance(tree, DTensor):
        return DTensor(fn(tree._local_tensor), tree._spec)
    if isinstance(tree, (tuple, list)):
        mapped = [_map_tensors(x, fn) for x in tree]
        return type(tree)(*mapped) if hasattr(tree, "_fields") else type(tree)(mapped)
    if isinstance(tree, dict):
        return {k: _map_tensors(v, fn) for k, v in tree.items()}
    return tree
