"""DTensor: one global tensor held in pieces over a device mesh, with torch.distributed.tensor's API.

Each rank holds its local piece (a plain minidl tensor, where autograd runs); the spec says how the pieces make
the global tensor. ``redistribute`` moves pieces between placements (``_redistribute.py``), differentiably;
``from_local``/``to_local`` cross between the two worlds. A gradient reaching a DTensor's local piece lies as
the DTensor does, except that a Partial one's gradient is Replicate (every part gets the whole gradient);
``grad_placements`` declares otherwise (a loss computed on local pieces gives Partial gradients).
Registered ops given DTensors (arithmetic and methods included) run by their sharding rules (``_dispatch.py``).
"""
from __future__ import annotations

import functools

from ..._tensor import Tensor
from ...autograd.function import Function
from ..._dtype import float32, float64
from ...ops.creation import empty
from ...ops.registry import OPS, methods
from .. import collectives, objects, state as dist_state
from ..device_mesh import DeviceMesh
from . import _strided
from . import _random
from ._redistribute import redistribute_local, replicated_partials, split_into_partials
from ._spec import DTensorSpec, normalized
from .placement_types import Replicate, Shard, _is_shard_like

__all__ = ["DTensor", "distribute_tensor"]


_MIXED = ("got mixed minidl.Tensor and DTensor, need to convert all minidl.Tensor to DTensor before calling "
          "distributed operators!")


class DTensor:
    __slots__ = ("_local_tensor", "_spec", "__weakref__")
    __minidl_mixed__ = f"minidl op {_MIXED}"   # (a plain tensor's operators leave a DTensor operand to it)

    def __init__(self, local_tensor: Tensor, spec: DTensorSpec):
        self._local_tensor, self._spec = local_tensor, spec

    # -- crossing between local and global ---------------------------------------------------------
    @staticmethod
    def from_local(local_tensor, device_mesh=None, placements=None, *, run_check=False, shape=None, stride=None,
                   grad_placements=None) -> "DTensor":
        """The DTensor whose piece on this rank is ``local_tensor`` (every rank calls it). Its global shape: the
        pieces' joined shape, assuming every rank's piece is as large as this one's (torch's assumption), or
        ``shape``. ``run_check`` gathers the pieces' shapes and refuses inconsistent ones, naming them (then
        uneven shards are measured, not assumed); without it they go unchecked."""
        mesh = device_mesh or _default_mesh(local_tensor)
        placements = normalized(placements, mesh, local_tensor.ndim, "DTensor.from_local")
        _one_partial_kind(placements)
        if (shape is None) != (stride is None):
            raise RuntimeError(f"DTensor.from_local: found shape: {shape}, stride: {stride}. Please pass both "
                               f"shape and stride at the same time.")
        if run_check and mesh.get_coordinate() is not None:
            global_shape = _checked_shape(local_tensor, mesh, placements)
        elif shape is not None:
            global_shape = tuple(int(s) for s in shape)
        else:
            global_shape = list(local_tensor.shape)
            for d, p in enumerate(placements):
                if _is_shard_like(p):
                    global_shape[p.dim] *= mesh.size(d)
        spec = DTensorSpec(mesh, placements, tuple(global_shape))
        if mesh.get_coordinate() is None:   # (a rank outside the mesh holds nothing, as torch's)
            return DTensor(empty(0, dtype=local_tensor.dtype, device=local_tensor.device), spec)
        local = local_tensor
        if grad_placements is not None:   # (the gradient reaching the piece is moved there: torch's direction)
            wanted = normalized(grad_placements, mesh, local_tensor.ndim, "DTensor.from_local")
            local = _GradAs.apply(local_tensor, spec.with_placements(replicated_partials(placements)), wanted)
        return DTensor(local, spec)

    def to_local(self, *, grad_placements=None) -> Tensor:
        """This rank's piece. ``grad_placements``: how the gradients that will reach the piece lie (Partial for a
        loss on the pieces): they are redistributed to this DTensor's own on the way back."""
        if grad_placements is None:
            return self._local_tensor
        declared = normalized(grad_placements, self.device_mesh, self.ndim, "DTensor.to_local")
        return _GradAs.apply(self._local_tensor, self._spec.with_placements(declared),
                             replicated_partials(self.placements))

    def full_tensor(self, *, grad_placements=None) -> Tensor:
        """The whole global tensor on every rank (gathered, reduced as needed)."""
        return self.redistribute(placements=(Replicate(),) * self.device_mesh.ndim).to_local(
            grad_placements=grad_placements)

    def redistribute(self, device_mesh=None, placements=None, *, async_op=False, forward_dtype=None,
                     backward_dtype=None) -> "DTensor":
        """This tensor at other placements (same mesh), each mesh dimension moved by its collective; its
        backward moves the gradient back. The pieces travel in ``forward_dtype`` (the gradients in
        ``backward_dtype``) where given. (The collectives run synchronously: ``async_op`` changes nothing.)"""
        mesh = device_mesh or self.device_mesh
        if mesh != self.device_mesh:
            raise NotImplementedError(f"DTensor.redistribute: moving to another mesh ({mesh}, from "
                                      f"{self.device_mesh}) is not supported")
        if placements is None:
            raise RuntimeError("placements is needed for redistribute!")
        placements = normalized(placements, mesh, self.ndim, "DTensor.redistribute")
        _one_partial_kind(placements)
        spec = self._spec.with_placements(placements)
        local = self._local_tensor
        if forward_dtype is not None:   # (the gradient goes back in the input's dtype unless told otherwise)
            backward_dtype = backward_dtype or local.dtype
            local = local.to(forward_dtype)
        return DTensor(redistribute_local(local, self._spec, spec, backward_dtype), spec)

    # -- what it is ---------------------------------------------------------------------------------
    @property
    def placements(self) -> tuple:
        return self._spec.placements

    @property
    def device_mesh(self) -> DeviceMesh:
        return self._spec.mesh

    @property
    def shape(self):
        from ...layout import Size
        return Size(self._spec.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self._spec.shape[dim]

    @property
    def ndim(self) -> int:
        return len(self._spec.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        n = 1
        for s in self._spec.shape:
            n *= s
        return n

    @property
    def dtype(self):
        return self._local_tensor.dtype

    @property
    def device(self):
        return self._local_tensor.device

    @property
    def requires_grad(self) -> bool:
        return self._local_tensor.requires_grad

    def requires_grad_(self, requires_grad: bool = True) -> "DTensor":
        self._local_tensor.requires_grad_(requires_grad)
        return self

    is_sparse = False   # (its pieces are strided; optimizers ask)

    def is_floating_point(self) -> bool:
        return self._local_tensor.is_floating_point()

    def item(self):
        """The one element's value, the same on every rank (a partial value is reduced, a shard gathered)."""
        return self.full_tensor().item()

    def __float__(self):
        return float(self.item())

    @property
    def is_leaf(self) -> bool:
        return self._local_tensor.is_leaf

    @property
    def is_meta(self) -> bool:
        return self._local_tensor.is_meta

    @property
    def data(self) -> "DTensor":
        return DTensor(self._local_tensor.detach(), self._spec)

    @data.setter
    def data(self, value) -> None:
        """The pieces replaced (``Module._apply``: to_empty, double); the local tensor stays the same object, so
        what holds it (an optimizer, fully_shard's groups) sees the new values."""
        if not isinstance(value, DTensor) or tuple(value.shape) != tuple(self.shape):
            raise RuntimeError(f"DTensor.data: expects a DTensor of shape {list(self.shape)}, got "
                               f"{type(value).__name__} {list(getattr(value, 'shape', ()))}")
        self._local_tensor.data = value._local_tensor
        self._spec = value._spec

    @property
    def grad(self):
        """The gradient, a DTensor lying as this one does (Partial as Replicate), or None."""
        g = self._local_tensor.grad
        return None if g is None else DTensor(g, self._spec.with_placements(replicated_partials(self.placements)))

    @grad.setter
    def grad(self, value):
        self._local_tensor.grad = None if value is None else value.to_local()

    @property
    def grad_fn(self):
        return self._local_tensor.grad_fn

    def __minidl_parameter__(self, requires_grad: bool) -> "DTensor":
        """``nn.Parameter(dtensor)``: a DTensor whose piece is a Parameter, which modules hold as one."""
        from ...nn.parameter import Parameter
        return _DTensorParameter(Parameter(self._local_tensor, requires_grad), self._spec)

    def detach(self) -> "DTensor":
        return DTensor(self._local_tensor.detach(), self._spec)

    def to(self, *args, **kwargs) -> "DTensor":
        """Each piece converted (a dtype; a device of the mesh's type), differentiably."""
        return DTensor(self._local_tensor.to(*args, **kwargs), self._spec)

    def uniform_(self, a=0.0, b=1.0, generator=None) -> "DTensor":
        """Each piece the whole tensor's uniform draws there (``_random.py``): as one process initialises."""
        return _random.fill_random_(self, "uniform_", a, b, generator)

    def normal_(self, mean=0.0, std=1.0, generator=None) -> "DTensor":
        return _random.fill_random_(self, "normal_", mean, std, generator)

    def fill_(self, value) -> "DTensor":
        return _random.fill_(self, value)

    def zero_(self) -> "DTensor":
        return _random.zero_(self)

    def copy_(self, src, non_blocking=False) -> "DTensor":
        """Every piece written from ``src``, a DTensor of this one's shape, moved to lie as this one does."""
        if not isinstance(src, DTensor) or tuple(src.shape) != tuple(self.shape):
            raise RuntimeError(f"DTensor.copy_: the source must be a DTensor of shape {list(self.shape)}, got "
                               f"{type(src).__name__} {list(getattr(src, 'shape', ()))}")
        self._local_tensor.copy_(src.redistribute(self.device_mesh, self.placements).to_local())
        return self

    def double(self) -> "DTensor":
        return self.to(float64)

    def float(self) -> "DTensor":
        return self.to(float32)

    @property
    def mT(self) -> "DTensor":
        return OPS["transpose"].function(self, -2, -1)

    @property
    def T(self) -> "DTensor":
        return OPS["permute"].function(self, tuple(range(self.ndim - 1, -1, -1)))

    def __dcp_slices__(self):
        """(global shape, [(offsets, piece)]) for minidl.dist.checkpoint: the box this rank holds (a replica where
        other ranks hold the same box; a partial sum has no box until it is reduced)."""
        if any(p.is_partial() for p in self.placements):
            raise ValueError(f"minidl.dist.checkpoint: a DTensor placed {_named(self.placements)} holds partial "
                             f"values; redistribute it to Shard/Replicate placements before saving")
        boxes = self._spec.local_boxes()
        if len(boxes) == 1:
            return self._spec.shape, [(boxes[0][0], self._local_tensor)]
        local = self._local_tensor   # (a _StridedShard's runs of rows: each a view of the piece, loaded in place)
        return self._spec.shape, [(offsets, local[tuple(slice(a, a + n) for a, n in zip(at, sizes))])
                                  for offsets, at, sizes in boxes]

    def __repr__(self):
        return (f"DTensor(local_tensor={self._local_tensor!r}, device_mesh={self.device_mesh!r}, "
                f"placements={self.placements!r})")

    def backward(self, gradient=None, retain_graph=None, create_graph=False) -> None:
        """Backward from this DTensor: ``gradient`` (a DTensor, or None for a one-element one) seeds each rank's
        piece. A partial sum's pieces each get the whole gradient, as the rules' backward expects of a sum (so a
        loss left partial needs no all-reduce); an average or extreme is made whole first."""
        out = self
        if any(p.is_partial() and p.reduce_op != "sum" for p in self.placements):
            out = self.redistribute(placements=[Replicate() if p.is_partial() and p.reduce_op != "sum" else p
                                                for p in self.placements])
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs: this DTensor has shape "
                                   f"{list(self.shape)}")
            seed = None if out._local_tensor.numel() == 1 else out._local_tensor.new_ones(out._local_tensor.shape)
        else:
            if not isinstance(gradient, DTensor):
                raise TypeError(f"DTensor.backward: gradient must be a DTensor, got {type(gradient).__name__}")
            seed = gradient.redistribute(out.device_mesh, replicated_partials(out.placements)).to_local()
        out._local_tensor.backward(seed, retain_graph=retain_graph, create_graph=create_graph)

    # -- arithmetic: the registry's ops, by their sharding rules ---------------------------------------------------
    def __add__(self, other):
        return _binary("add", self, other)

    def __radd__(self, other):
        return _binary("add", other, self)

    def __sub__(self, other):
        return _binary("sub", self, other)

    def __rsub__(self, other):
        return _binary("sub", other, self)

    def __mul__(self, other):
        return _binary("mul", self, other)

    def __rmul__(self, other):
        return _binary("mul", other, self)

    def __truediv__(self, other):
        return _binary("div", self, other)

    def __rtruediv__(self, other):
        return _binary("div", other, self)

    def __pow__(self, other):
        return _binary("pow", self, other)

    def __rpow__(self, other):
        return _binary("pow", other, self)

    def __mod__(self, other):
        return _binary("remainder", self, other)

    def __rmod__(self, other):
        return _binary("remainder", other, self)

    def __lt__(self, other):
        return _binary("lt", self, other)

    def __le__(self, other):
        return _binary("le", self, other)

    def __gt__(self, other):
        return _binary("gt", self, other)

    def __ge__(self, other):
        return _binary("ge", self, other)

    def __neg__(self):
        return OPS["neg"].function(self)

    def __matmul__(self, other):
        return _binary("matmul", self, other)

    def __rmatmul__(self, other):
        return _binary("matmul", other, self)

    @classmethod
    def __minidl_function__(cls, name, fn, args, kwargs, in_place=False):
        """An op given DTensors: run by its sharding rule (``_dispatch.py``)."""
        from ._dispatch import dispatch
        return dispatch(name, fn, args, kwargs, in_place)

    def __getattr__(self, name):
        """A Tensor method of a registered op (``d.sum(0)``): the op, which runs by its sharding rule. A plain
        tensor's insides asked of a DTensor: code that is no registered op was given one — a TypeError, not an
        AttributeError, even under hasattr/getattr with a default: minidl's ops test for a tensor that way, and
        would otherwise fail later with a stranger error."""
        method = _op_methods().get(name)
        if method is not None:   # (an in-place twin, x.add_(y), comes back to DTensor marked in place)
            return functools.partial(method, self)
        if name in _TENSOR_INSIDES:
            raise TypeError("a minidl op got a DTensor where it needs a minidl.Tensor: only registered ops with a "
                            "sharding rule take DTensors; use .to_local() or .full_tensor() for a plain tensor")
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")


_op_methods = functools.cache(methods)   # (Tensor method name -> method: the registry's, read once)


_TENSOR_INSIDES = frozenset(("_storage", "_layout", "_base", "_wrapped_number", "_history_version"))


def _one_partial_kind(placements) -> None:
    kinds = {p.reduce_op for p in placements if p.is_partial()}
    if len(kinds) > 1 and kinds != {"sum", "avg"}:
        raise ValueError(f"Mixed Partial reduce types are not supported in the same placement list. Found reduce "
                         f"ops: {kinds}. Please ensure all Partial placements use the same reduce operation.")


class _DTensorParameter(DTensor):
    """A DTensor a module holds as a parameter (``isinstance(p, nn.Parameter)`` holds: ``_is_param``)."""

    __slots__ = ()
    _is_param = True

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


class _GradAs(Function):
    """Identity forward; backward: the gradient, which lies as ``declared``, redistributed to ``wanted``. A
    Partial wanted where the gradient is whole is a split of it (torch's internal R -> P): for a sum each rank
    keeps 1/k of it, for avg, max and min the whole."""

    @staticmethod
    def forward(ctx, local, declared_spec, wanted):
        ctx.declared, ctx.wanted = declared_spec, wanted
        return local.view_as(local)

    @staticmethod
    def backward(ctx, grad):
        spec = ctx.declared
        moved = redistribute_local(grad, spec, spec.with_placements(replicated_partials(ctx.wanted)))
        if spec.mesh.get_coordinate() is None:
            return moved, None, None
        return split_into_partials(moved, spec.mesh, spec.placements, ctx.wanted), None, None


def _binary(name, a, b):
    """Op ``name`` of a DTensor and another operand (a DTensor, a tensor, a number); NotImplemented for others."""
    if not all(isinstance(x, (DTensor, Tensor, bool, int, float)) for x in (a, b)):
        return NotImplemented
    return OPS[name].function(a, b)


def _named(placements) -> str:
    return "[" + ", ".join(str(p) for p in placements) + "]"


def _default_mesh(tensor) -> DeviceMesh:
    """torch's default: a 1-D mesh over the world (its group, no new one), of the tensor's device type."""
    state = dist_state._state()
    kind = tensor.device.type if hasattr(tensor, "device") else "cpu"
    mesh = state.get(("default_mesh", kind))
    if mesh is None:
        world = dist_state.resolve(None, "DTensor")
        mesh = state[("default_mesh", kind)] = DeviceMesh.from_group(world, kind)
    return mesh


def _checked_shape(local, mesh, placements) -> tuple:
    """The global shape from every rank's piece, gathered along each mesh dimension; a clear error where
    the pieces cannot make one tensor (a Shard's pieces not ``chunk``'s sizes, other dimensions differing). With a
    _StridedShard every piece's shape travels along, and each must be its rank's box of the shape they make."""
    shape, pieces = list(local.shape), {mesh.get_coordinate(): (mesh.get_rank(), tuple(local.shape))}
    strided = _strided.strided(placements)
    for d, p in reversed(list(enumerate(placements))):   # (nested shards join from the last mesh dimension)
        group = mesh.get_group(d)
        seen = [None] * mesh.size(d)
        objects.all_gather_object(seen, (tuple(shape), pieces), group=group)
        pieces = {c: piece for _, part in seen for c, piece in part.items()}
        seen = [s for s, _ in seen]
        split = _is_shard_like(p)
        others = {tuple(s[:p.dim] + s[p.dim + 1:]) if split else tuple(s) for s in seen}
        rows = [s[p.dim] for s in seen] if split else None
        even = rows is None or strided or rows == [Shard.local_shard_size_and_offset(sum(rows), len(rows), r)[0]
                                                   for r in range(len(rows))]
        if len(others) > 1 or not even:
            named = "; ".join(f"rank {r} has {list(s)}" for r, s in zip(group.ranks, seen))
            raise ValueError(f"DTensor.from_local(run_check=True): the local tensors along mesh dimension {d} "
                             f"({p}) cannot make one tensor: {named}" + (
                                 f" (a Shard({p.dim})'s pieces must have chunk's sizes)" if not even else ""))
        if split:
            shape[p.dim] = sum(rows)
    boxes = {c: _strided.box(shape, placements, mesh.shape, c)[0] for c in pieces} if strided else {}
    wrong = [f"rank {rank} has {list(s)}, not {list(boxes[c])}" for c, (rank, s) in sorted(pieces.items())
             if c in boxes and s != boxes[c]]
    if wrong:
        raise ValueError(f"DTensor.from_local(run_check=True): the local tensors cannot make one tensor of shape "
                         f"{shape} placed {_named(placements)}: {'; '.join(wrong)}")
    for d, p in enumerate(placements):   # (Replicate pieces are made equal: the first rank's, as torch's)
        if p.is_replicate():
            collectives.broadcast(local, src=mesh.get_group(d).ranks[0], group=mesh.get_group(d))
    return tuple(shape)


def distribute_tensor(tensor, device_mesh=None, placements=None, *, src_data_rank=0) -> DTensor:
    """``tensor`` (the whole, on every rank) placed over the mesh: each rank keeps its piece. The data is the
    one on group rank ``src_data_rank`` of each mesh dimension (broadcast along each in turn, as torch's), or
    each rank's own (None). A Partial placement gives each rank tensor / k (sum) or the tensor (avg, max, min)."""
    mesh = device_mesh or _default_mesh(tensor)
    placements = normalized(placements, mesh, tensor.ndim, "distribute_tensor")
    _one_partial_kind(placements)
    if isinstance(tensor, DTensor):
        if tensor.device_mesh != mesh:
            raise ValueError(f"Cannot distribute a DTensor with device mesh {tensor.device_mesh} to a different "
                             f"device mesh {mesh}.")
        if tensor.placements != placements:
            raise ValueError(f"Cannot distribute a DTensor with placements {tensor.placements} to a different "
                             f"placements {placements}. do you want to call `redistribute` instead?")
        return tensor
    spec = DTensorSpec(mesh, placements, tuple(tensor.shape))
    if mesh.get_coordinate() is None:
        return DTensor(empty(0, dtype=tensor.dtype, device=tensor.device), spec)
    whole = tensor.detach()
    if src_data_rank is not None and not whole.is_meta:   # (a meta tensor has no data to agree on)
        whole = whole.contiguous().clone()
        for d in range(mesh.ndim):
            if not 0 <= src_data_rank < mesh.size(d):
                raise ValueError(f"distribute_tensor: src_data_rank {src_data_rank} is not a rank of mesh "
                                 f"dimension {d} (of size {mesh.size(d)})")
            group = mesh.get_group(d)
            collectives.broadcast(whole, src=group.ranks[src_data_rank], group=group)
    whole_everywhere = (Replicate(),) * mesh.ndim
    local = redistribute_local(whole, spec.with_placements(whole_everywhere),
                               spec.with_placements(replicated_partials(placements)))
    local = split_into_partials(local, mesh, whole_everywhere, placements)
    if local.untyped_storage() is whole.untyped_storage() and local.numel() < whole.numel():
        local = local.clone()   # (a slice of the whole would keep all of it alive)
    return DTensor(local.detach().requires_grad_(tensor.requires_grad), spec)
