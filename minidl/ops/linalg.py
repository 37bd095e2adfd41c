"""Matrix products: matmul (batched, broadcasting, vector cases), mm, bmm, dot, einsum."""
from __future__ import annotations

import math
import string

from .. import _dtype as dt
from ..autograd import Function
from ..layout import Layout, broadcast_shapes, transpose
from ..layout import diagonal as diagonal_layout
from .autocast_mode import autocast_op
from .core import buf, cast, check_devices, computed_in_float32, kernel, new_like_shape, sum_to
from .elementwise import binary_raw
from .reduction import _safe_pow, norm
from .views import StridedScatter, view_of
from .inplace import rebased
from .registry import op


def _matmul_raw(a, b):
    """(..., m, k) @ (..., k, n) with broadcast batch dims, no autograd."""
    return cast(_matmul_compute(a, b), a.dtype)


def _matmul_compute(a, b):
    """``_matmul_raw`` in the kernel's dtype (float32 for the half types, to be rounded once by the
    caller). The kernel gets the operands' layouts (transposed or broadcast ones included) and packs
    nothing itself."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    compute = dt.compute_dtype(a.dtype)
    ac, bc = cast(a, compute), cast(b, compute)
    if a.ndim > 2 and b.ndim == 2 and ac._layout.is_contiguous:   # (..., m, k) @ (k, n): one GEMM of all rows,
        out = new_like_shape(tuple(a.shape[:-1]) + (n,), compute, a)   # not one per batch matrix
        if out.numel():
            rows, out_rows = ac.reshape(out.numel() // n, k), out.reshape(-1, n)   # (k may be 0)
            kernel("matmul", a)(buf(rows), rows._layout, buf(bc), bc._layout, buf(out_rows), out_rows._layout)
        return out
    if a.ndim == 2 and b.ndim == 2:                # the common case: nothing to broadcast
        batch = ()
    else:
        try:
            batch = tuple(broadcast_shapes(a.shape[:-2], b.shape[:-2], op="matmul"))
        except RuntimeError:
            raise RuntimeError(f"matmul: the batch dimensions of shapes {list(a.shape)} and {list(b.shape)} "
                               f"cannot be broadcast together") from None
        ac, bc = ac.expand(batch + (m, k)), bc.expand(batch + (k, n))
    out = new_like_shape(batch + (m, n), compute, a)
    if out.numel():
        kernel("matmul", a)(buf(ac), ac._layout, buf(bc), bc._layout, buf(out), out._layout)
    return out


class MatMul(Function):
    """(..., m, k) @ (..., k, n) with broadcast batch dims."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _matmul_raw(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = sum_to(_product_like(g, b.mT, a), a.shape) if ctx.needs_input_grad[0] else None
        gb = sum_to(_product_like(a.mT, g, b), b.shape) if ctx.needs_input_grad[1] else None
        return ga, gb


class Linear(Function):
    """``x @ weight.T + bias`` as one node (PyTorch's addmm): the weight's gradient ``g.T @ x``
    comes out packed like the weight, and no transpose or broadcast nodes enter the graph."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        out = _matmul_compute(x, view_of(weight, transpose(weight._layout, 0, 1)))
        if bias is not None:  # added before the one rounding to x's dtype, as PyTorch's addmm
            binary_raw("binary", "add", out, bias, out.dtype, out.dtype, out=out)
        ctx.save_for_backward(x, weight)
        return cast(out, x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        gx = g @ weight if need_x else None
        rows = g.reshape(math.prod(g.shape[:-1]), g.shape[-1])   # (not -1: no length is implied by 0 elements)
        gw = rows.mT @ x.reshape(rows.shape[0], x.shape[-1]) if need_w else None
        gb = rows.sum(0) if need_b else None
        return gx, gw, gb


def _product_like(x, y, like):
    """x @ y in ``like``'s memory order: as (y.mT @ x.mT).mT when ``like`` is column-major (say
    Linear's ``weight.T``), so that the gradient of a transposed weight comes out packed."""
    shape, strides = like.shape, like.stride()
    if len(shape) >= 2 and shape[-2] > 1 and strides[-2] == 1 and strides[-1] == shape[-2]:
        return (y.mT @ x.mT).mT
    return x @ y


@op(samples=lambda t: [
    t.S("mm", lambda a, b: a @ b, t.rn(3, 4), t.rn(4, 2)),
    t.S("matmul-batched-broadcast", matmul, t.rn(2, 1, 3, 4), t.rn(3, 4, 2)),
    t.S("matmul-vector-matrix", matmul, t.rn(3), t.NC(t.rn(3, 4), "F")),
    t.S("matmul-matrix-vector", matmul, t.NC(t.rn(2, 3), "F"), t.rn(3)),
    t.S("matmul", matmul, t.rn(2, 3), t.rn(3, 2), second_order=True)])
@autocast_op("matmul")
def matmul(a, b):
    check_devices("matmul", a, b)
    if a.dtype is not b.dtype:
        raise RuntimeError(f"matmul: expected both operands to have the same dtype, but got {a.dtype.name} "
                           f"and {b.dtype.name}")
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"matmul: both arguments need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        raise RuntimeError(f"matmul: shapes {list(a.shape)} and {list(b.shape)} cannot be multiplied "
                           f"({k_a} != {k_b})")
    if a.ndim == 1 and b.ndim == 1:
        return MatMul.apply(a.unsqueeze(0), b.unsqueeze(1)).reshape(())
    if a.ndim == 1:
        return MatMul.apply(a.unsqueeze(0), b).squeeze(-2)
    if b.ndim == 1:
        return MatMul.apply(a, b.unsqueeze(1)).squeeze(-1)
    return MatMul.apply(a, b)


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("linear", linear, t.rn(4, 3), t.NC(t.rn(5, 3)), t.rn(5)),
    t.S("linear-3d-no-bias", linear, t.NC(t.rn(2, 3, 4), "gap"), t.rn(2, 4)),
    t.S("linear-1d", linear, t.rn(3), t.rn(2, 3), t.rn(2))])
@autocast_op("linear")
def linear(input, weight, bias=None):
    """``torch.nn.functional.linear``: input (..., in) @ weight (out, in).T + bias (out)."""
    check_devices("linear", input, weight, *(() if bias is None else (bias,)))
    if weight.ndim != 2 or input.ndim == 0 or input.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"linear: input {list(input.shape)} and weight {list(weight.shape)} don't fit: expected "
                           f"input (..., {weight.shape[1] if weight.ndim == 2 else 'in'}) and weight (out, in)")
    if bias is not None and bias.shape not in ((weight.shape[0],), ()):
        raise RuntimeError(f"linear: bias of shape {list(bias.shape)} doesn't match weight {list(weight.shape)}")
    if input.dtype is not weight.dtype or (bias is not None and bias.dtype is not weight.dtype):
        raise RuntimeError(f"linear: expected input, weight and bias of one dtype, got {input.dtype.name}, "
                           f"{weight.dtype.name}" + ("" if bias is None else f" and {bias.dtype.name}"))
    if input.ndim == 1:
        return Linear.apply(input.unsqueeze(0), weight, bias).squeeze(0)
    return Linear.apply(input, weight, bias)


@op(samples=lambda t: [t.S("mm", mm, t.rn(3, 4), t.NC(t.rn(4, 2), "F"))])
@autocast_op("mm")
def mm(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError(f"mm: expected 2D tensors, got {a.ndim}D and {b.ndim}D")
    return matmul(a, b)


@op(samples=lambda t: [
    t.S("bmm-noncontig", lambda a, b: bmm(a, b.transpose(1, 2)), t.rn(2, 3, 4), t.rn(2, 5, 4))])
@autocast_op("bmm")
def bmm(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise RuntimeError(f"bmm: expected 3D tensors, got {a.ndim}D and {b.ndim}D")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {list(a.shape)} and {list(b.shape)}")
    return matmul(a, b)


@op(samples=lambda t: [t.S("dot", dot, t.rn(4), t.NC(t.rn(4), "neg"))])
@autocast_op("dot")
def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"dot: 1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    return matmul(a, b)


@op(samples=lambda t: [t.S("outer", outer, t.rn(3), t.rn(4))])
def outer(a, b):
    return a.reshape((-1, 1)) * b.reshape((1, -1))


def _add_product(op, x, product, beta, alpha):
    """beta * x + alpha * product, in product's shape; x is not read when beta is 0 (its NaNs stay out)."""
    if broadcast_shapes(x.shape, product.shape, op=op) != product.shape:
        raise RuntimeError(f"{op}: input of shape {list(x.shape)} does not broadcast to the product's shape "
                           f"{list(product.shape)}")
    if not product.dtype.is_floating_point:  # torch truncates the factors to integers for integer tensors
        beta, alpha = math.trunc(beta), math.trunc(alpha)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (x if beta == 1 else x * beta)


@op(inplace=rebased, samples=lambda t: [
    t.S("addmm-beta-alpha", lambda x, a, b: addmm(x, a, b, beta=0.5, alpha=-2), t.rn(4), t.rn(3, 2), t.rn(2, 4))])
@autocast_op("addmm")
@computed_in_float32
def addmm(x, mat1, mat2, beta=1, alpha=1):
    """beta * x + alpha * (mat1 @ mat2) for matrices mat1, mat2."""
    return _add_product("addmm", x, mm(mat1, mat2), beta, alpha)


@op(inplace=rebased, samples=lambda t: [
    t.S("baddbmm", lambda x, a, b: x.baddbmm(a, b, alpha=3), t.rn(2, 3, 4), t.NC(t.rn(2, 3, 2), "gap"),
        t.rn(2, 2, 4))])
@autocast_op("baddbmm")
@computed_in_float32
def baddbmm(x, batch1, batch2, beta=1, alpha=1):
    """beta * x + alpha * (batch1 @ batch2) for batches of matrices (b, n, m) and (b, m, p)."""
    return _add_product("baddbmm", x, bmm(batch1, batch2), beta, alpha)


@op(samples=lambda t: [
    t.S("diag-vector-offset", lambda v: diag(v, -1), t.rn(3)),
    t.S("diag-matrix", lambda m: m.diag(1), t.NC(t.rn(3, 4), "F"))])
def diag(x, diagonal=0):
    """A 1-D x as the ``diagonal``-th diagonal of a square matrix; a 2-D x's diagonal, copied."""
    if x.ndim == 1:
        n = x.shape[0] + abs(diagonal)
        return StridedScatter.apply(x, (n, n), diagonal_layout(Layout((n, n)), diagonal, 0, 1))
    if x.ndim == 2:
        return x.diagonal(diagonal).clone()
    raise RuntimeError(f"diag: expected a 1-D or 2-D tensor, got {x.ndim}-D")


@op(samples=lambda t: [t.S("trace", trace, t.rn(3, 4))])
@autocast_op("trace")
def trace(x):
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, got a {x.ndim}-D tensor")
    return x.diagonal().sum()


@op(method=False, samples=lambda t: [
    t.S("cdist-p2", lambda a, b: cdist(a, b), t.rn(2, 4, 3), t.rn(5, 3)),
    t.S("cdist-p2-matmul", lambda a, b: cdist(a, b, compute_mode="use_mm_for_euclid_dist"), t.rn(4, 3), t.rn(2, 3)),
    t.S("cdist-p1", lambda a, b: cdist(a, b, 1), t.rn(3, 2), t.rn(4, 2)),
    t.S("cdist-p3", lambda a, b: cdist(a, b, 3), t.rn(3, 2), t.rn(4, 2)),
    t.S("cdist-inf", lambda a, b: cdist(a, b, float("inf")), t.distinct(3, 2), t.distinct(2, 2) + 0.05),
    t.S("sort-cdist", lambda a, b: cdist(a, b).sort(1).values ** 2, t.rn(3, 2), t.rn(4, 2), second_order=True)])
@autocast_op("cdist")
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """p-norm distances between the rows of x1 (..., P, M) and x2 (..., R, M): (..., P, R).

    For p = 2 and more than 25 rows (or ``compute_mode='use_mm_for_euclid_dist'``) through
    |a|^2 + |b|^2 - 2 a.b, one matrix product, as PyTorch does; otherwise from the differences."""
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"cdist: expected x1 (..., P, M) and x2 (..., R, M) with the same M, got "
                           f"{list(x1.shape)} and {list(x2.shape)}")
    if p < 0:
        raise RuntimeError(f"cdist: only supports non-negative p values, got {p}")
    modes = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")
    if compute_mode not in modes:
        raise ValueError(f"cdist: compute_mode must be one of {modes}, got {compute_mode!r}")
    large = x1.shape[-2] > 25 or x2.shape[-2] > 25
    if p == 2 and (compute_mode == modes[1] or (compute_mode == modes[0] and large)):
        squares = (x1 * x1).sum(-1, keepdim=True) + (x2 * x2).sum(-1).unsqueeze(-2) - 2 * matmul(x1, x2.mT)
        return _safe_pow(squares.clamp_min(0), 0.5)
    return norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p, dim=-1)


# ----------------------------------------------------------------------------- einsum
def _parse(equation, operands):
    """Expand '...' into fresh letters (right-aligned across operands) and infer the output."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise RuntimeError(f"einsum(): {len(terms)} subscripts in '{equation}' but {len(operands)} operands")
    free = [c for c in string.ascii_letters if c not in equation]
    spans = [x.ndim - (len(t) - 3) if "..." in t else 0 for t, x in zip(terms, operands)]
    ell = "".join(free[:max(spans, default=0)])
    expanded = []
    for term, x, n in zip(terms, operands, spans):
        term = term.replace("...", ell[len(ell) - n:] if n else "")
        if len(term) != x.ndim:
            raise RuntimeError(f"einsum(): subscript '{term}' has {len(term)} letters for an operand with "
                               f"{x.ndim} dims")
        expanded.append(term)
    if arrow:
        return expanded, rhs.replace("...", ell)
    letters = "".join(expanded)
    return expanded, ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell))


def _letters(sublist):
    """A sublist of dims (numbers 0-51, Ellipsis) as subscript letters, as torch's (0-25: A-Z, 26-51: a-z)."""
    letters = []
    for d in sublist:
        if d is Ellipsis:
            letters.append("...")
        elif isinstance(d, int) and 0 <= d < 52:
            letters.append(string.ascii_uppercase[d] if d < 26 else string.ascii_lowercase[d - 26])
        else:
            raise ValueError(f"einsum(): subscript in subscript list is not within the valid range [0, 52), got {d!r}")
    return "".join(letters)


def einsum_equation(equation, *operands):
    """(equation, operands) of an einsum call in either form: the equation first, or the sublist form
    ``einsum(a, [0, 1], b, [1, 2], [0, 2])``."""
    if isinstance(equation, str):
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        return equation, tuple(operands)
    args = (equation,) + operands
    tensors, sublists = args[0::2], args[1::2]
    output = "->" + _letters(args[-1]) if len(args) % 2 else ""
    return ",".join(_letters(s) for s in sublists) + output, tuple(tensors[:len(sublists)])


def _diagonalize(term, x):
    """Repeated letters in one term ('ii') take the diagonal."""
    while len(set(term)) != len(term):
        for i, c in enumerate(term):
            j = term.find(c, i + 1)
            if j >= 0:
                x = x.diagonal(0, i, j)
                term = term[:i] + term[i + 1:j] + term[j + 1:] + c
                break
    return term, x


def _sum_out(x, term, letters):
    """x summed over the dims of ``letters``; those of size 1 are squeezed instead, as torch's: only a real
    sum widens integers to int64."""
    dims = [term.index(c) for c in letters]
    wide = [d for d in dims if x.shape[d] != 1]
    x = x.sum(wide, keepdim=True) if wide else x
    return x.squeeze(dims) if dims else x


def _contract(ta, a, tb, b, keep):
    """Contract two operands over their shared letters not in ``keep`` via one batched matmul."""
    shared = [c for c in ta if c in tb]
    batch = [c for c in shared if c in keep]
    summed = [c for c in shared if c not in keep]
    only_a = [c for c in ta if c not in tb]
    only_b = [c for c in tb if c not in ta]
    # letters only in one operand and not kept are summed right away
    a = _sum_out(a, ta, [c for c in only_a if c not in keep])
    ta = "".join(c for c in ta if c in tb or c in keep)
    b = _sum_out(b, tb, [c for c in only_b if c not in keep])
    tb = "".join(c for c in tb if c in ta or c in keep)
    only_a = [c for c in ta if c not in tb]
    only_b = [c for c in tb if c not in ta]
    sizes = {c: n for t, x in ((ta, a), (tb, b)) for c, n in zip(t, x.shape)}
    for c in shared:
        if c in ta and c in tb and a.shape[ta.index(c)] != b.shape[tb.index(c)] and 1 not in (
                a.shape[ta.index(c)], b.shape[tb.index(c)]):
            raise RuntimeError(f"einsum(): operands do not broadcast on subscript '{c}': "
                               f"{a.shape[ta.index(c)]} vs {b.shape[tb.index(c)]}")
        sizes[c] = max(a.shape[ta.index(c)], b.shape[tb.index(c)])
    a = a.permute([ta.index(c) for c in batch + only_a + summed]).expand([sizes[c] for c in batch + only_a + summed])
    b = b.permute([tb.index(c) for c in batch + summed + only_b]).expand([sizes[c] for c in batch + summed + only_b])
    nb, na, ns, nbb = (math.prod(sizes[c] for c in g) for g in (batch, only_a, summed, only_b))
    common = dt.promote_types(a.dtype, b.dtype)  # (a sum above widened integers; torch then refuses)
    out = matmul(a.reshape((nb, na, ns)).to(common), b.reshape((nb, ns, nbb)).to(common))
    term = "".join(batch + only_a + only_b)
    return term, out.reshape([sizes[c] for c in term])


@op(method=False, samples=lambda t: [
    t.S("einsum-matmul", lambda a, b: einsum("ij,jk->ik", a, b), t.rn(3, 4), t.rn(4, 2)),
    t.S("einsum-batched", lambda a, b: einsum("bij,bjk->bik", a, b), t.rn(2, 3, 4), t.NC(t.rn(2, 4, 2), "gap")),
    t.S("einsum-trace-diag", lambda a: einsum("ii->i", a), t.rn(3, 3)),
    t.S("einsum-sum", lambda a: einsum("ij->", a), t.rn(3, 4)),
    t.S("einsum-ellipsis-outer", lambda a, b: einsum("...i,j->...ij", a, b), t.rn(2, 3), t.rn(4)),
    t.S("einsum-implicit", lambda a, b: einsum("ij,kj", a, b), t.rn(3, 4), t.rn(2, 4)),
    t.S("einsum-three", lambda a, b, c: einsum("ij,jk,kl->il", a, b, c), t.rn(2, 3), t.rn(3, 4), t.rn(4, 2)),
    t.S("einsum-sublist", lambda a, b: einsum(a, [0, 1], b, [Ellipsis, 1, 30], [30, 0]), t.rn(3, 4), t.rn(4, 2))])
@autocast_op("einsum")
def einsum(equation, *operands):
    """An einsum equation and its operands, or the sublist form (operand, its dims as numbers, ..., the
    output's dims)."""
    equation, operands = einsum_equation(equation, *operands)
    terms, out = _parse(equation, operands)
    pairs = [_diagonalize(t, x) for t, x in zip(terms, operands)]
    term, x = pairs[0]
    for i, (tb, b) in enumerate(pairs[1:], 1):
        later = out + "".join(t for t, _ in pairs[i + 1:])
        term, x = _contract(term, x, tb, b, later)
    drop = [i for i, c in enumerate(term) if c not in out]
    if drop:
        x = x.sum(drop)
        term = "".join(c for c in term if c in out)
    if sorted(term) != sorted(out):
        raise RuntimeError(f"einsum(): output subscript '{out}' does not match the operands")
    return x.permute([term.index(c) for c in out]) if term != out else x
