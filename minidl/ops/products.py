"""Products beyond matmul, written over it and the elementwise ops: mv, tensordot, inner, vdot, cross, kron,
addmv/addr/addbmm, linalg's vecdot, multi_dot (in the cheapest order), diagonal, matrix_power and vander."""
from __future__ import annotations

import math
import warnings

from .. import _dtype as dt
from .._tensor_base import TensorBase
from ..layout import broadcast_shapes, normalize_dim
from .autocast_mode import autocast_op
from .core import computed_in_float32
from .creation import eye, ones_like, zeros_like
from .elementwise import where
from .inplace import rebased
from .linalg import _add_product, dot, matmul, mm
from .registry import op
from .shape_ops import cat, stack
from .solvers import inv


def _same_dtype(name, a, b):
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{name}: expected both operands to have the same dtype, but got {a.dtype.name} and "
                           f"{b.dtype.name}")


@op(samples=lambda t: [t.S("mv", mv, t.rn(3, 4), t.rn(4)), t.S("mv-F", mv, t.NC(t.rn(2, 3), "F"), t.rn(3))])
@autocast_op("mv")
def mv(input, vec):
    """A matrix (n, m) times a vector (m)."""
    if input.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"mv: expected a matrix and a vector, got shapes {list(input.shape)} and {list(vec.shape)}")
    return matmul(input, vec)


def _tensordot_dims(a, b, dims):
    """tensordot's ``dims`` (a count, a pair of dim lists or ints, or a tensor of either) as two lists."""
    if isinstance(dims, TensorBase):
        dims = int(dims.item()) if dims.numel() == 1 else dims.tolist()
    if isinstance(dims, (tuple, list)):
        if len(dims) != 2:
            raise RuntimeError(f"tensordot: dims must be a count or a pair of dim lists, got {dims!r}")
        return [[d] if isinstance(d, int) else list(d) for d in dims]
    if dims < 0:
        raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
    if dims > min(a.ndim, b.ndim):
        raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}")
    return list(range(-dims, 0)), list(range(dims))


@op(method=False, samples=lambda t: [
    t.S("tensordot-2", lambda a, b: tensordot(a, b), t.rn(2, 3, 4), t.rn(3, 4, 2)),
    t.S("tensordot-lists", lambda a, b: tensordot(a, b, ([2, 0], [0, 1])), t.rn(2, 3, 4), t.rn(4, 2)),
    t.S("tensordot-size1", lambda a, b: tensordot(a, b, ([1], [0])), t.rn(2, 1), t.rn(3, 2)),
    t.S("tensordot-0", lambda a, b: tensordot(a, b, 0), t.rn(2), t.rn(3))])
@autocast_op("tensordot")
def tensordot(a, b, dims=2, out=None):
    """Sum of products over the dims ``dims`` pairs: a's free dims, then b's. A contracted dim of size 1 on one
    side is summed out of the other (as torch's)."""
    if out is not None:
        raise NotImplementedError("tensordot: out= is not supported")
    _same_dtype("tensordot", a, b)
    dims_a, dims_b = _tensordot_dims(a, b, dims)
    if len(dims_a) != len(dims_b):
        raise RuntimeError(f"tensordot: both dim lists must have the same length, got {dims_a} and {dims_b}")
    dims_a = [normalize_dim(d, a.ndim, "tensordot") for d in dims_a]
    dims_b = [normalize_dim(d, b.ndim, "tensordot") for d in dims_b]
    for da, db in zip(dims_a, dims_b):
        sa, sb = a.shape[da], b.shape[db]
        if sb == 1 and sa != 1:
            a = a.sum(da, keepdim=True, dtype=a.dtype)
        elif sa == 1 and sb != 1:
            b = b.sum(db, keepdim=True, dtype=b.dtype)
        elif sa != sb:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {sa} in dim {da} and "
                               f"second has size {sb} in dim {db}")
    free_a = [d for d in range(a.ndim) if d not in dims_a]
    free_b = [d for d in range(b.ndim) if d not in dims_b]
    size = math.prod(a.shape[d] for d in dims_a)
    rows, cols = [a.shape[d] for d in free_a], [b.shape[d] for d in free_b]
    left = a.permute(free_a + dims_a).reshape(math.prod(rows), size)   # (no -1: a contraction may be empty)
    right = b.permute(dims_b + free_b).reshape(size, math.prod(cols))
    return matmul(left, right).reshape(rows + cols)


@op(samples=lambda t: [
    t.S("inner", inner, t.rn(2, 3), t.rn(4, 3)),
    t.S("inner-scalar", inner, t.rn(), t.rn(2, 3))])
def inner(input, other):
    """Sum of products over the last dims (a product when either is 0-d)."""
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{list(input.shape)} and {list(other.shape)}")
    return tensordot(input, other, ([-1], [-1]))


@op(samples=lambda t: [t.S("vdot", vdot, t.rn(4), t.rn(4))])
@autocast_op("vdot")
def vdot(input, other):
    """dot of two vectors (the first conjugated: the same for real ones)."""
    if input.ndim != 1 or other.ndim != 1 or input.shape != other.shape:
        raise RuntimeError(f"vdot: expected two 1-D tensors of one size, got shapes {list(input.shape)} and "
                           f"{list(other.shape)}")
    _same_dtype("vdot", input, other)
    return dot(input, other)


def _rotate(x, dim):
    """x's 3 components along dim moved one place: (x1, x2, x0)."""
    return cat([x.narrow(dim, 1, 2), x.narrow(dim, 0, 1)], dim)


@op("linalg_cross", method=False, namespace="linalg", samples=lambda t: [
    t.S("linalg-cross", lambda a, b: linalg_cross(a, b), t.rn(2, 3), t.rn(1, 3)),
    t.S("linalg-cross-dim", lambda a, b: linalg_cross(a, b, dim=0), t.rn(3, 2), t.rn(3, 2))])
@autocast_op("linalg_cross")
def linalg_cross(input, other, *, dim=-1):
    """The cross product of 3-vectors along ``dim``, the other dims broadcast."""
    if input.ndim != other.ndim:
        raise RuntimeError(f"linalg.cross: inputs must have the same number of dimensions, got shapes "
                           f"{list(input.shape)} and {list(other.shape)}")
    _same_dtype("linalg.cross", input, other)
    d = normalize_dim(dim, input.ndim, "linalg.cross")
    if input.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {input.shape[d]} and "
                           f"{other.shape[d]}")
    shape = list(broadcast_shapes(input.shape, other.shape, op="linalg.cross"))
    a, b = input.expand(shape), other.expand(shape)
    a1, b1 = _rotate(a, d), _rotate(b, d)
    return a1 * _rotate(b1, d) - _rotate(a1, d) * b1


@op(samples=lambda t: [
    t.S("cross-dim-1", lambda a, b: cross(a, b, 1), t.rn(2, 3, 3), t.rn(2, 3, 3)),
    t.S("cross-dim", lambda a, b: a.cross(b, dim=0), t.rn(3, 2), t.rn(3, 2))])
@autocast_op("cross")
def cross(input, other, dim=None):
    """torch.cross: linalg.cross along ``dim``, by default (deprecated) the first dim of input of size 3."""
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated. Please either pass the dim "
                      "explicitly or simply use torch.linalg.cross. The default value of dim will change to agree "
                      "with that of linalg.cross in a future release.", UserWarning, stacklevel=3)
        sizes = list(input.shape)
        if 3 not in sizes:
            raise RuntimeError(f"cross: no dimension of size 3 in input of shape {sizes}")
        dim = sizes.index(3)
    return linalg_cross(input, other, dim=dim)


@op(samples=lambda t: [
    t.S("kron", kron, t.rn(2, 3), t.rn(2, 2)),
    t.S("kron-ranks", kron, t.rn(3), t.rn(2, 1, 2))])
def kron(input, other):
    """The Kronecker product: every element of input times all of other, in blocks."""
    n = max(input.ndim, other.ndim)
    a_shape = [1] * (n - input.ndim) + list(input.shape)
    b_shape = [1] * (n - other.ndim) + list(other.shape)
    a = input.reshape([s for d in a_shape for s in (d, 1)])
    b = other.reshape([s for d in b_shape for s in (1, d)])
    return (a * b).reshape([p * q for p, q in zip(a_shape, b_shape)])


@op(inplace=rebased, samples=lambda t: [
    t.S("addmv", lambda x, m, v: addmv(x, m, v, beta=0.5, alpha=2), t.rn(3), t.rn(3, 4), t.rn(4)),
    t.S("addmv-broadcast", addmv, t.rn(1), t.rn(2, 3), t.rn(3))])
@autocast_op("addmv")
@computed_in_float32
def addmv(input, mat, vec, *, beta=1, alpha=1):
    """beta * input + alpha * (mat @ vec)."""
    return _add_product("addmv", input, mv(mat, vec), beta, alpha)


def _outer_product(name, vec1, vec2):
    for which, v in (("vec1", vec1), ("vec2", vec2)):
        if v.ndim != 1:
            raise RuntimeError(f"{name}: Expected 1-D argument {which}, but got {v.ndim}-D")
    return vec1.reshape(-1, 1) * vec2.reshape(1, -1)


@op(inplace=rebased, samples=lambda t: [
    t.S("addr", lambda x, a, b: addr(x, a, b, beta=2, alpha=-1), t.rn(3, 2), t.rn(3), t.rn(2)),
    t.S("addr-broadcast", addr, t.rn(2), t.rn(3), t.rn(2))])
@autocast_op("addr")
@computed_in_float32
def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """beta * input + alpha * outer(vec1, vec2); for bool tensors, (beta and input) or (alpha and outer)."""
    product = _outer_product("addr", vec1, vec2)
    for name, factor in (("beta", beta), ("alpha", alpha)):
        if not product.dtype.is_floating_point and isinstance(factor, float):   # (addr's own rule, not addmm's)
            raise RuntimeError(f"addr: For integral input tensors, argument {name} must not be a floating point "
                               f"number (got {factor} for {product.dtype.name} vectors)")
    if product.dtype is dt.bool_:
        out = product if alpha else zeros_like(product)
        return out | input if beta else out
    return _add_product("addr", input, product, beta, alpha)


@op(inplace=rebased, samples=lambda t: [
    t.S("addbmm", lambda x, a, b: addbmm(x, a, b, beta=0.5, alpha=2), t.rn(2, 3), t.rn(4, 2, 3), t.rn(4, 3, 3)),
    t.S("addbmm-broadcast", addbmm, t.rn(1), t.NC(t.rn(2, 2, 3), "gap"), t.rn(2, 3, 2))])
@autocast_op("addbmm")
@computed_in_float32
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta * input + alpha * the sum over the batch of batch1[i] @ batch2[i], as one matrix product."""
    if batch1.ndim != 3 or batch2.ndim != 3:
        raise RuntimeError(f"addbmm: expected 3-D batch1 and batch2, got shapes {list(batch1.shape)} and "
                           f"{list(batch2.shape)}")
    if batch1.shape[0] != batch2.shape[0]:
        raise RuntimeError(f"addbmm: batch1 and batch2 must have same number of batches, got {batch1.shape[0]} and "
                           f"{batch2.shape[0]}")
    count, n, m = batch1.shape
    rows = batch1.permute(1, 0, 2).reshape(n, count * m)
    return _add_product("addbmm", input, mm(rows, batch2.reshape(count * m, batch2.shape[2])), beta, alpha)


@op("linalg_vecdot", method=False, namespace="linalg", samples=lambda t: [
    t.S("vecdot", lambda x, y: linalg_vecdot(x, y), t.rn(2, 3), t.rn(3)),
    t.S("vecdot-dim", lambda x, y: linalg_vecdot(x, y, dim=0), t.rn(4, 2), t.rn(4, 1))])
@autocast_op("linalg_vecdot")
def linalg_vecdot(x, y, *, dim=-1):
    """Sum of products along ``dim``, the other dims broadcast."""
    _same_dtype("linalg.vecdot", x, y)
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"linalg.vecdot: Expected a floating point tensor as input. Got {x.dtype.name}")
    shape = broadcast_shapes(x.shape, y.shape, op="linalg.vecdot")
    return (x * y).sum(normalize_dim(dim, len(shape), "linalg.vecdot"))


def _chain_order(sizes):
    """The cheapest parenthesisation of matrices sizes[i] x sizes[i+1] (the classic dynamic program):
    split[i][j] is where the product of matrices i..j splits."""
    n = len(sizes) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for span in range(1, n):
        for i in range(n - span):
            j = i + span
            cost[i][j], split[i][j] = min((cost[i][k] + cost[k + 1][j] + sizes[i] * sizes[k + 1] * sizes[j + 1], k)
                                          for k in range(i, j))
    return split


def _chain(matrices, split, i, j):
    if i == j:
        return matrices[i]
    k = split[i][j]
    return mm(_chain(matrices, split, i, k), _chain(matrices, split, k + 1, j))


def _multi_dot(name, tensors):
    """The product of 2-D matrices (the first may be a row, the last a column vector), cheapest order first."""
    tensors = list(tensors)
    if len(tensors) < 2:
        raise RuntimeError(f"{name}: expected at least 2 tensors but got {len(tensors)}")
    last = len(tensors) - 1
    for i, x in enumerate(tensors):
        if x.ndim != 2 and not (i in (0, last) and x.ndim == 1):
            which = {0: "the first tensor", last: "the last tensor"}.get(i, f"tensor {i}")
            raise RuntimeError(f"{name}: {which} must be {'1D or 2D' if i in (0, last) else '2D'} but got "
                               f"{x.ndim}D")
        if x.dtype is not tensors[0].dtype:
            raise RuntimeError(f"{name}: all tensors must have the same dtype but tensor 0 is {tensors[0].dtype.name} "
                               f"and tensor {i} is {x.dtype.name}")
    matrices = [tensors[0].reshape(1, -1) if tensors[0].ndim == 1 else tensors[0]] + tensors[1:last] + \
        [tensors[last].reshape(-1, 1) if tensors[last].ndim == 1 else tensors[last]]
    for i in range(last):
        if matrices[i].shape[1] != matrices[i + 1].shape[0]:
            raise RuntimeError(f"{name}: tensors {i} and {i + 1} with shapes {list(tensors[i].shape)} and "
                               f"{list(tensors[i + 1].shape)} cannot be multiplied")
    sizes = [m.shape[0] for m in matrices] + [matrices[-1].shape[1]]
    out = _chain(matrices, _chain_order(sizes), 0, last)
    if tensors[0].ndim == 1:
        out = out.squeeze(0)
    return out.squeeze(-1) if tensors[last].ndim == 1 else out


@op("linalg_multi_dot", method=False, namespace="linalg", samples=lambda t: [
    t.S("multi-dot", lambda a, b, c, d: linalg_multi_dot([a, b, c, d]), t.rn(4), t.rn(4, 2), t.rn(2, 5), t.rn(5, 3)),
    t.S("multi-dot-two", lambda a, b: linalg_multi_dot((a, b)), t.rn(3, 2), t.rn(2))])
@autocast_op("linalg_multi_dot")
def linalg_multi_dot(tensors):
    """A chain of matrix products in the order of fewest multiplications."""
    return _multi_dot("multi_dot()", tensors)


@op(method=False, samples=lambda t: [
    t.S("chain-matmul", lambda a, b, c: chain_matmul(a, b, c), t.rn(2, 3), t.rn(3, 4), t.rn(4, 2))])
@autocast_op("chain_matmul")
def chain_matmul(*matrices, out=None):
    """torch's deprecated chain of 2-D matrix products (linalg.multi_dot's older form)."""
    if out is not None:
        raise NotImplementedError("chain_matmul: out= is not supported")
    if len(matrices) == 1 and isinstance(matrices[0], (tuple, list)):
        matrices = tuple(matrices[0])
    for i, x in enumerate(matrices):
        if x.ndim != 2:
            raise RuntimeError(f"chain_matmul: tensor {i} must be 2D but got {x.ndim}D")
    if len(matrices) == 1:
        return matrices[0].clone()
    return _multi_dot("chain_matmul", matrices)


@op("linalg_diagonal", method=False, namespace="linalg", samples=lambda t: [
    t.S("linalg-diagonal", lambda a: linalg_diagonal(a, offset=1), t.rn(2, 3, 4))])
def linalg_diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """The diagonals of the matrices over dims (dim1, dim2), a view."""
    return A.diagonal(offset, dim1, dim2)


@op("linalg_matrix_power", method=False, namespace="linalg", samples=lambda t: [
    t.S("matrix-power-3", lambda a: linalg_matrix_power(a, 3), t.rn(2, 3, 3)),
    t.S("matrix-power-1", lambda a: linalg_matrix_power(a, 1), t.rn(3, 3))])
def linalg_matrix_power(A, n):
    """A (a batch of square matrices) to the integer power n, by repeated squaring (of A's inverse for n < 0)."""
    if A.ndim < 2:
        raise RuntimeError("linalg.matrix_power: The input tensor A must have at least 2 dimensions.")
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.matrix_power: A must be batches of square matrices, but they are "
                           f"{A.shape[-2]} by {A.shape[-1]} matrices")
    if n == 0:   # the identity, as a result of A with a zero gradient (torch's)
        identity = eye(A.shape[-1], dtype=A.dtype, device=A.device)
        return where(ones_like(A, dtype=dt.bool_), identity, A)
    if n < 0:
        A, n = inv(A), -n
    result, square = None, A
    while n:
        if n & 1:
            result = square if result is None else matmul(result, square)
        n >>= 1
        if n:
            square = matmul(square, square)
    return result


@op(samples=lambda t: [t.S("matrix-power", lambda a: a.matrix_power(2), t.rn(3, 3))])
def matrix_power(A, n):
    """torch.matrix_power: linalg.matrix_power under its older name."""
    return linalg_matrix_power(A, n)


@op("linalg_vander", method=False, namespace="linalg", samples=lambda t: [
    t.S("vander", lambda x: linalg_vander(x), t.rn(2, 3)),
    t.S("vander-N", lambda x: linalg_vander(x, N=4), t.rn(2))])
def linalg_vander(x, *, N=None):
    """The Vandermonde matrix of x's last dim (a 0-d x: one element): columns x**0 .. x**(N-1), integers in int64
    (as torch's)."""
    if x.ndim == 0:
        x = x.reshape(1)
    n = x.shape[-1] if N is None else N
    if n <= 1:
        raise RuntimeError(f"linalg.vander: N must be greater than 1, got {n}")
    if x.dtype is dt.bool_:
        raise RuntimeError("linalg.vander supports floating point, complex, and integer tensors, but got bool")
    if not x.dtype.is_floating_point:
        x = x.to(dt.int64)
    powers = [ones_like(x), x]
    while len(powers) < n:
        powers.append(powers[-1] * x)
    return stack(powers, -1)
