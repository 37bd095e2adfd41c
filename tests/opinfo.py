"""Gradient-check samples for every differentiable op.

``OPS`` maps the name of every :class:`minidl.autograd.Function` subclass defined under
``minidl.ops`` to one or more :class:`Sample` s that exercise it (``test_gradcheck`` fails when
a Function has no entry, so an op cannot ship without a gradient check). ``COMPOSITES`` covers
the public ops built from several Functions, and ``GRADGRAD`` the second-order checks.

A sample is a callable on float64 tensors plus the values of those tensors. Values that must
reach the op through a non-contiguous leaf are wrapped in :class:`NC`. Inputs are chosen away
from the points where an op is not differentiable (ties for max, 0 for abs/relu, integers for
floor, clamp bounds ...). Index tensors, masks and other constants live inside the callables.
"""
from __future__ import annotations

import importlib
import pkgutil

import numpy as np

import minidl
from minidl import layout as L
from minidl.autograd import Function
from minidl.ops import conversion as C
from minidl.ops import views as V

_rng = np.random.default_rng(20240531)

# Function subclasses that only template concrete ops (each must have concrete subclasses)
ABSTRACT = {"Unary", "Binary", "View"}


def function_classes() -> dict:
    """name -> class for every Function subclass defined in (any submodule of) minidl.ops."""
    import minidl.ops as ops_pkg
    for info in pkgutil.walk_packages(ops_pkg.__path__, "minidl.ops."):
        importlib.import_module(info.name)
    found, stack, seen = {}, [Function], set()
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub in seen:
                continue
            seen.add(sub)
            stack.append(sub)
            if sub.__module__.startswith("minidl.ops"):
                assert sub.__name__ not in found, f"two Function classes named {sub.__name__}"
                found[sub.__name__] = sub
    return found


# ----------------------------------------------------------------------------- inputs
class NC:
    """Values to be passed as a non-contiguous leaf: 'F' (column-major), 'gap' (every other
    element of a wider buffer) or 'neg' (negative stride on dim 0)."""

    def __init__(self, values, kind="F"):
        self.values, self.kind = np.asarray(values, dtype=np.float64), kind

    def materialize(self, values: np.ndarray) -> np.ndarray:
        kind = self.kind
        if kind == "F" and values.ndim >= 2:
            return np.asfortranarray(values)
        if kind == "neg" and values.ndim >= 1:
            return np.ascontiguousarray(values[::-1])[::-1]
        wide = np.zeros(values.shape[:-1] + (2 * values.shape[-1],))
        wide[..., ::2] = values
        return wide[..., ::2]


def values_of(spec) -> np.ndarray:
    return spec.values if isinstance(spec, NC) else np.asarray(spec, dtype=np.float64)


def make_leaf(spec, values, requires_grad=True):
    """A float64 leaf holding ``values``, with the memory layout ``spec`` asks for."""
    if isinstance(spec, NC):
        t = minidl.from_numpy(spec.materialize(np.array(values, dtype=np.float64)))
        assert not t.is_contiguous() or t.numel() <= 1
    else:
        t = minidl.tensor(np.array(values, dtype=np.float64), dtype=minidl.float64)
    return t.requires_grad_(requires_grad)


def rn(*shape):
    return _rng.standard_normal(shape)


def pos(*shape):
    return _rng.uniform(0.5, 2.0, shape)


def nonzero(*shape):
    return _rng.choice([-1.0, 1.0], shape) * _rng.uniform(0.3, 2.0, shape)


def distinct(*shape):
    """Values at least 0.2 apart from each other (no ties for max/min/sort-like ops)."""
    n = int(np.prod(shape))
    return (_rng.permutation(n) * 0.3 - 0.15 * n + _rng.uniform(-0.05, 0.05, n)).reshape(shape)


def frac(*shape):
    """Values at least 0.2 away from any integer (floor, round, ... are locally constant)."""
    return _rng.integers(-3, 3, shape) + _rng.uniform(0.2, 0.8, shape)


def avoid(shape, points, lo=-1.5, hi=1.5, gap=0.05):
    """Uniform values in [lo, hi] at least ``gap`` away from each of the scalars ``points``."""
    out = _rng.uniform(lo, hi, shape)
    for _ in range(100):
        bad = np.zeros(shape, bool)
        for p in points:
            bad |= np.abs(out - p) < gap
        if not bad.any():
            return out
        out = np.where(bad, _rng.uniform(lo, hi, shape), out)
    raise AssertionError("could not draw values away from the given points")


DEVICE = "cpu"  # where const() puts its tensors (test_cuda_ops runs the samples on "cuda" too)


def const(values, dtype=None):
    """A constant (no grad) tensor on DEVICE: index tensors, masks, fixed operands."""
    return minidl.tensor(np.asarray(values), dtype=dtype, device=DEVICE)


class Sample:
    def __init__(self, name, fn, *inputs, eps=1e-6, atol=1e-5, rtol=1e-4):
        self.name, self.fn, self.inputs = name, fn, list(inputs)
        self.eps, self.atol, self.rtol = eps, atol, rtol

    def __repr__(self):
        return self.name


def S(name, fn, *inputs, **tol):
    return Sample(name, fn, *inputs, **tol)


# ----------------------------------------------------------------------------- table
OPS: dict = {}


def op(name, *samples):
    OPS.setdefault(name, []).extend(samples)


# unary: (class name, public function, input generator)
_UNARY = [
    ("Neg", minidl.neg, rn), ("Abs", minidl.abs, nonzero), ("Sign", minidl.sign, nonzero),
    ("Exp", minidl.exp, rn), ("Log", minidl.log, pos), ("Log1p", minidl.log1p, lambda *s: _rng.uniform(-0.5, 2, s)),
    ("Expm1", minidl.expm1, rn), ("Sqrt", minidl.sqrt, pos), ("Rsqrt", minidl.rsqrt, pos),
    ("Reciprocal", minidl.reciprocal, nonzero), ("Sin", minidl.sin, rn), ("Cos", minidl.cos, rn),
    ("Tan", minidl.tan, lambda *s: _rng.uniform(-1.2, 1.2, s)), ("Tanh", minidl.tanh, rn),
    ("Sigmoid", minidl.sigmoid, rn), ("Relu", minidl.relu, nonzero), ("Erf", minidl.erf, rn),
    ("Floor", minidl.floor, frac), ("Ceil", minidl.ceil, frac), ("Round", minidl.round, frac),
    ("Trunc", minidl.trunc, frac), ("Square", minidl.square, rn),
]
for _name, _fn, _gen in _UNARY:
    op(_name,
       S(f"{_name.lower()}", _fn, _gen(3, 4)),
       S(f"{_name.lower()}-fortran", _fn, NC(_gen(4, 3), "F")),
       S(f"{_name.lower()}-negstride", lambda x, f=_fn: f(x).sum(0), NC(_gen(5), "neg")))

op("Add",
   S("add-broadcast", lambda a, b: a + b, rn(3, 4), rn(4)),
   S("add-broadcast-3d-noncontig", lambda a, b: minidl.add(a, b, alpha=2), rn(2, 1, 3), NC(rn(4, 3), "F")),
   S("add-scalar", lambda a: 2.5 + a, rn(3)),
   S("add-0d", lambda a, b: a + b, rn(), rn(2, 3)))
op("Sub",
   S("sub-broadcast", lambda a, b: a - b, rn(3, 1), rn(1, 4)),
   S("rsub-scalar", lambda a: 1.5 - a, NC(rn(3, 2), "gap")))
op("Mul",
   S("mul-broadcast", lambda a, b: a * b, rn(2, 3, 4), rn(3, 1)),
   S("mul-same", lambda a: a * a, NC(rn(3, 3), "F")),
   S("mul-scalar", lambda a: a * -3.0, rn(4)),
   S("rdiv-scalar", lambda b: 2.0 / b, NC(nonzero(3, 2), "gap")))  # b.reciprocal() * 2.0, as PyTorch
op("Div",
   S("div-broadcast", lambda a, b: a / b, rn(3, 4), nonzero(4)),
   S("div-noncontig", lambda a, b: a / b, NC(rn(3, 3), "F"), NC(nonzero(3, 3), "neg")))
op("Pow",
   S("pow-tensors", lambda a, b: a ** b, pos(3, 4), rn(3, 4)),
   S("pow-broadcast", lambda a, b: minidl.pow(a, b), pos(2, 3), rn(3)),
   S("pow-scalar-exponent", lambda a: a ** 3, rn(3, 2)),
   S("pow-scalar-base", lambda b: 2.0 ** b, rn(4)))
_m_a = rn(3, 4)
op("Maximum",
   S("maximum", minidl.maximum, _m_a, _m_a + nonzero(3, 4)),
   S("maximum-broadcast", minidl.maximum, distinct(3, 4), distinct(4) + 0.1))
op("Minimum",
   S("minimum", minidl.minimum, _m_a, _m_a + nonzero(3, 4)),
   S("minimum-broadcast", minidl.minimum, distinct(3, 4), distinct(4) + 0.1))
op("Gate",  # ReLU's backward: a where b > 0, else 0
   S("gate", lambda a, b: minidl.ops.elementwise.Gate.apply(a, b), rn(3, 4), nonzero(3, 4)),
   S("gate-broadcast", lambda a, b: minidl.ops.elementwise.Gate.apply(a, b), rn(3, 4), nonzero(4)))
_fd_b = pos(3, 4)
op("FloorDivide", S("floor_divide", lambda a, b: a // b, _fd_b * frac(3, 4), _fd_b))
op("Remainder",
   S("remainder", lambda a, b: a % b, _fd_b * frac(3, 4), _fd_b),
   S("remainder-scalar", lambda a: minidl.remainder(a, 1.0), frac(5)))
op("Atan2",
   S("atan2-broadcast", minidl.atan2, rn(3, 4), nonzero(4)),
   S("atan2-noncontig-scalar", lambda y: minidl.atan2(y, -0.5), NC(rn(3, 2), "F")))
op("LogAddExp",
   S("logaddexp-broadcast", minidl.logaddexp, rn(3, 4), NC(rn(4), "neg")),
   S("logaddexp-far-apart", lambda a, b: a.logaddexp(b * 30), rn(5), rn(5)))
_where_mask = rn(3, 4) > 0
op("Where",
   S("where-broadcast", lambda a, b: minidl.where(const(_where_mask), a, b), rn(3, 4), rn(4)),
   S("where-scalar", lambda a: minidl.where(const([[True, False, True]]), a, 0.0), NC(rn(2, 3), "F")))
_cl_lo = rn(4) - 1
op("Clamp",
   S("clamp-scalars", lambda x: x.clamp(-0.5, 0.5), avoid((3, 4), [-0.5, 0.5])),
   S("clamp-min-tensor", lambda x, lo: minidl.clamp(x, min=lo), _cl_lo + nonzero(3, 4), _cl_lo),
   S("clamp-tensors", lambda x, lo, hi: minidl.clamp(x, lo, hi),
     _cl_lo + avoid((3, 4), [0.0, 1.0], -1, 2), _cl_lo, _cl_lo + 1),
   S("clamp-max-only", lambda x: x.clamp(max=0.3), NC(avoid((4, 3), [0.3]), "F")))

op("Sum",
   S("sum-all", lambda x: x.sum(), rn(3, 4)),
   S("sum-dim", lambda x: x.sum(1), NC(rn(3, 4), "F")),
   S("sum-dims-keepdim", lambda x: x.sum((0, 2), keepdim=True), rn(2, 3, 4)),
   S("sum-negdim", lambda x: minidl.sum(x, -1), NC(rn(3, 4), "neg")))
_pz = pos(3, 4)
_pz[0, 1] = 0.0
_pz[2, 0] = _pz[2, 3] = 0.0
op("Prod",
   S("prod-all", lambda x: x.prod(), pos(2, 3)),
   S("prod-dim", lambda x: x.prod(1), NC(pos(3, 4), "F")),
   S("prod-keepdim", lambda x: x.prod(0, keepdim=True), rn(3, 4)),
   S("prod-zeros", lambda x: x.prod(1), _pz))
op("Extreme",
   S("amax-dim", lambda x: x.amax(1), distinct(3, 4)),
   S("amin-dims-keepdim", lambda x: x.amin((0, 2), keepdim=True), distinct(2, 3, 4)),
   S("max-all", lambda x: x.max(), NC(distinct(3, 4), "F")),
   S("min-all", lambda x: minidl.min(x), distinct(5)))
op("ExtremeDim",
   S("max-dim", lambda x: x.max(1).values, distinct(3, 4)),
   S("min-dim-keepdim", lambda x: minidl.min(x, 0, keepdim=True), NC(distinct(3, 4), "F")),
   S("max-dim-0d", lambda x: x.max(0)[0], rn()))
op("Cumsum",
   S("cumsum", lambda x: x.cumsum(1), rn(3, 4)),
   S("cumsum-noncontig", lambda x: minidl.cumsum(x, 0), NC(rn(4, 3), "F")))
_cpz = pos(3, 4)
_cpz[0, 1] = 0.0
_cpz[1, 3] = 0.0
op("Cumprod",
   S("cumprod", lambda x: x.cumprod(1), pos(3, 4)),
   S("cumprod-negative-noncontig", lambda x: x.cumprod(0), NC(nonzero(4, 3), "F")),
   S("cumprod-zeros", lambda x: x.cumprod(1), _cpz))
op("Softmax",
   S("softmax", lambda x: minidl.softmax(x, 1), rn(3, 4)),
   S("softmax-dim0-noncontig", lambda x: x.softmax(0), NC(rn(3, 4), "F")),
   S("log_softmax", lambda x: minidl.log_softmax(x, -1), rn(3, 4)),
   S("log_softmax-3d", lambda x: x.log_softmax(1), rn(2, 3, 4)))

# views
op("Permute", S("permute", lambda x: x.permute(2, 0, 1), rn(2, 3, 4)),
   S("permute-noncontig", lambda x: x.permute(1, 0), NC(rn(3, 4), "F")))
op("Transpose", S("transpose", lambda x: x.transpose(0, 2), rn(2, 3, 4)),
   S("t", lambda x: x.t() * 1, NC(rn(3, 4), "neg")))
op("Expand", S("expand", lambda x: x.expand(3, 4), rn(3, 1)),
   S("expand-new-dims", lambda x: x.expand(2, 3, 4), NC(rn(4), "gap")))
op("Unsqueeze", S("unsqueeze", lambda x: x.unsqueeze(1), rn(3, 4)))
op("Squeeze", S("squeeze-dim", lambda x: x.squeeze(1), rn(3, 1, 4)),
   S("squeeze-all", lambda x: x.squeeze(), rn(1, 3, 1)))
op("ViewAs", S("view", lambda x: x.view(4, 3), rn(3, 4)),
   S("reshape-copy", lambda x: x.reshape(-1), NC(rn(3, 4), "F")),
   S("flatten", lambda x: x.flatten(1), rn(2, 3, 2)))
op("Narrow", S("narrow", lambda x: x.narrow(1, 1, 2), rn(3, 4)),
   S("narrow-noncontig", lambda x: minidl.narrow(x, 0, 1, 2), NC(rn(4, 3), "F")))
op("Select", S("select", lambda x: x[1], rn(3, 4)),
   S("select-last-col", lambda x: x[:, -1], NC(rn(3, 4), "F")),
   S("unbind", lambda x: x.unbind(1), rn(2, 3)))
op("Slice", S("slice", lambda x: x[1:3], rn(4, 3)),
   S("slice-step", lambda x: x[:, ::2], NC(rn(3, 5), "gap")),
   S("slice-negative-step", lambda x: x[::-2, 1:], rn(5, 3)))
op("Diagonal", S("diagonal", lambda x: x.diagonal(), rn(3, 4)),
   S("diagonal-offset", lambda x: x.diagonal(1), NC(rn(4, 4), "F")),
   S("diagonal-3d", lambda x: minidl.diagonal(x, -1, 0, 2), rn(3, 2, 3)))
op("AsStrided",
   S("as_strided", lambda x: x.as_strided((2, 2), (1, 3), 1), rn(3, 4)),
   S("as_strided-overlapping", lambda x: x.as_strided((3, 3), (1, 1)), rn(6)),
   S("as_strided-of-offset-view", lambda x: x[2:].as_strided((2,), (1,)), rn(6)))
op("FlipView", S("flip_view", lambda x: V.flip_view(x, (0,)), rn(3, 4)),
   S("flip_view-2dims", lambda x: V.flip_view(x, (0, 1)) * 1, NC(rn(3, 4), "F")))
op("Unreduce", S("unreduce-keepdim", lambda x: V.unreduce(x, (3, 4), (1,), True), rn(3, 1)),
   S("unreduce", lambda x: V.unreduce(x, (2, 3, 4), (0, 2), False), rn(3)))
op("StridedScatter",
   S("strided_scatter", lambda g: V.StridedScatter.apply(g, (3, 4), L.Layout((2, 2), (4, 2), 1)), rn(2, 2)),
   S("strided_scatter-noncontig", lambda g: V.StridedScatter.apply(g, (5,), L.Layout((3,), (2,), 0)),
     NC(rn(3), "gap")))
op("Clone", S("clone", lambda x: x.clone(), rn(3, 4)),
   S("contiguous", lambda x: x.contiguous(), NC(rn(3, 4), "F")))

# indexing movers (the public indexing ops are in COMPOSITES too)
op("Take",
   S("getitem-list", lambda x: x[[0, 2, 2]], rn(3, 4)),
   S("gather", lambda x: x.gather(1, const([[0, 0], [3, 1], [2, 2]])), NC(rn(3, 4), "F")),
   S("take", lambda x: minidl.take(x, const([[5, 0], [11, -1]])), rn(3, 4)))
op("IndexPut",
   S("scatter", lambda x, s: x.scatter(1, const([[0, 2], [1, 3], [3, 0]]), s), rn(3, 4), rn(3, 2)),
   S("scatter_add-dups", lambda x, s: x.scatter_add(0, const([[0, 1, 0], [0, 0, 1]]), s), rn(2, 3),
     NC(rn(2, 3), "F")),
   S("setitem-index-broadcast-value", lambda x, v: _index_put(x, v), rn(3, 4), rn(4)))


def _index_put(x, v):
    y = x * 1
    y[const([0, 2])] = v
    return y


# joining and padding
op("Cat",
   S("cat-dim0", lambda a, b: minidl.cat([a, b], 0), rn(2, 3), rn(4, 3)),
   S("cat-dim1-noncontig", lambda a, b: minidl.cat([a, b, a], 1), NC(rn(3, 2), "F"), rn(3, 1)),
   S("stack", lambda a, b: minidl.stack([a, b], 1), rn(2, 3), NC(rn(2, 3), "gap")))
op("ConstantPad",
   S("pad", lambda x: minidl.pad(x, (1, 2)), rn(3, 4)),
   S("pad-2d-value", lambda x: minidl.pad(x, (1, 0, 2, 1), value=0.5), NC(rn(3, 4), "F")),
   S("pad-negative", lambda x: minidl.pad(x, (-1, 2, 1, -1)), rn(3, 4)))

# matrix products
op("Linear",
   S("linear", minidl.nn.functional.linear, rn(4, 3), NC(rn(5, 3)), rn(5)),
   S("linear-3d-no-bias", minidl.nn.functional.linear, NC(rn(2, 3, 4), "gap"), rn(2, 4)),
   S("linear-1d", minidl.nn.functional.linear, rn(3), rn(2, 3), rn(2)))
op("MatMul",
   S("mm", lambda a, b: a @ b, rn(3, 4), rn(4, 2)),
   S("matmul-batched-broadcast", minidl.matmul, rn(2, 1, 3, 4), rn(3, 4, 2)),
   S("matmul-vector-matrix", minidl.matmul, rn(3), NC(rn(3, 4), "F")),
   S("matmul-matrix-vector", minidl.matmul, NC(rn(2, 3), "F"), rn(3)),
   S("dot", minidl.dot, rn(4), NC(rn(4), "neg")),
   S("bmm-noncontig", lambda a, b: minidl.bmm(a, b.transpose(1, 2)), rn(2, 3, 4), rn(2, 5, 4)))

# dtype / device
op("ToDtype",
   S("to-float64", lambda x: C.ToDtype.apply(x, minidl.float64), rn(3, 4)),
   S("to-float32-and-back", lambda x: x.to(minidl.float32).to(minidl.float64) * 2, rn(3, 4),
     eps=1e-2, atol=1e-3, rtol=1e-3))
op("ToDevice", S("to-cpu", lambda x: C.ToDevice.apply(x, minidl.device("cpu")), NC(rn(3, 4), "F")))


# in-place bookkeeping
def _overwrite_with_constant(x, w):
    y = x * 2
    y.copy_(const(np.full((3, 4), 0.5)))
    return y * w + x


def _setitem_view(x, v):
    y = x * 1
    y[1:, ::2] = v
    return y * x


def _inplace_on_view(x, w):
    y = x.sin()  # saves x, not y: y may be modified
    y[:, 1].mul_(w)
    return y


def _fill_row(x):
    y = x * 3
    y[0] = 5.0
    return y * x


op("Constant", S("overwrite-with-constant", _overwrite_with_constant, rn(3, 4), rn(3, 4)),
   S("setitem-constant", _fill_row, rn(3, 4)))
op("CopySlices", S("setitem-view-of-nonleaf", _setitem_view, rn(3, 4), rn(2, 2)),
   S("inplace-mul-on-view", _inplace_on_view, rn(3, 4), rn(3)))


# ----------------------------------------------------------------------------- composites
_mask34 = rn(3, 4) > 0
_dup_idx = [[0, 1, 0], [2, 2, 1]]


def _setitem_advanced(x, v, w):
    y = x * 1
    y[const([0, 2]), 1:3] = v
    y[:, 0] += w
    return y


# ----------------------------------------------------------------------------- convolution / pooling
import minidl.nn.functional as _F  # noqa: E402
from minidl.ops import conv as _conv  # noqa: E402

_w2122 = rn(2, 1, 2, 2)
_g_cm = (2, 2, 1, 2, 1, 0, 1, 1) + _conv._geometry("im2col", 3, 4, (2, 2), (1, 2), (1, 0), (1, 1))  # (4, 2)
op("Convolution",
   S("conv2d", lambda x, w, b: _F.conv2d(x, w, b, stride=(2, 1), padding=1), rn(1, 2, 4, 3), rn(2, 2, 2, 2), rn(2)),
   S("conv2d-groups-dilation", lambda x, w: _F.conv2d(x, w, padding=(1, 0), dilation=(2, 1), groups=2),
     NC(rn(2, 2, 3, 3), "F"), rn(4, 1, 2, 2)),
   S("conv2d-input-only", lambda x: _F.conv2d(x, const(_w2122), stride=2), rn(1, 1, 4, 4)),
   S("conv2d-batch-bias", lambda x, w, b: _F.conv2d(x, w, b), rn(3, 2, 3, 3), NC(rn(2, 2, 2, 2), "gap"), rn(2)))
op("Im2Col",
   S("unfold", lambda x: _conv.im2col(x, (2, 1), stride=1, padding=(0, 1)), rn(1, 2, 3, 2)),
   S("channel-major", lambda x: _conv.Im2Col.apply(x, _g_cm, True), rn(2, 2, 3, 4)),
   S("avg_pool2d", lambda x: _F.avg_pool2d(x, 2, stride=1, padding=1), rn(1, 2, 3, 3)))
op("Col2Im",
   S("conv_transpose2d", lambda x, w, b: _F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
     rn(1, 2, 2, 2), rn(2, 1, 3, 2), rn(1)),
   S("fold", lambda c: _conv.col2im(c, (3, 3), 2, padding=1, stride=2), rn(1, 8, 4)),
   S("channel-major", lambda c: _conv.Col2Im.apply(c, (2, 2, 3, 4), _g_cm, True), rn(8, 16)))
op("MaxPool2d",
   S("max_pool2d", lambda x: _F.max_pool2d(x, 2, stride=1, padding=1), distinct(1, 2, 3, 3)),
   S("max_pool2d-ceil-dilation", lambda x: _F.max_pool2d(x, 2, stride=2, dilation=(1, 2), ceil_mode=True),
     NC(distinct(2, 1, 5, 4), "F")))
_pool_x = distinct(2, 2, 4, 5)


def _max_pool_backward(g):
    x = const(_pool_x).requires_grad_()
    return minidl.autograd.grad(_F.max_pool2d(x, 2, stride=(1, 2)), x, g, create_graph=True)[0]


op("MaxPool2dGrad",  # the first backward of max pooling, as create_graph records it; linear in g
   S("max_pool2d-backward", _max_pool_backward, rn(2, 2, 3, 2)))

COMPOSITES = [
    S("mean-all", lambda x: x.mean(), rn(3, 4)),
    S("mean-dim-keepdim", lambda x: minidl.mean(x, 1, keepdim=True), NC(rn(3, 4), "F")),
    S("var", lambda x: x.var(), rn(3, 4)),
    S("var-dim-biased", lambda x: x.var(1, unbiased=False, keepdim=True), rn(3, 4)),
    S("var-correction", lambda x: minidl.var(x, 0, correction=2), NC(rn(5, 3), "F")),
    S("std", lambda x: x.std(), rn(3, 4)),
    S("std-dim", lambda x: minidl.std(x, 1), rn(3, 4)),
    S("logsumexp", lambda x: x.logsumexp(1), rn(3, 4)),
    S("logsumexp-dims", lambda x: minidl.logsumexp(x, (0, 2), keepdim=True), NC(rn(2, 3, 4), "gap")),
    S("norm-fro", lambda x: x.norm(), rn(3, 4)),
    S("norm-2-dim", lambda x: minidl.norm(x, 2, 1), rn(3, 4)),
    S("norm-1", lambda x: x.norm(1), nonzero(3, 4)),
    S("norm-3", lambda x: x.norm(3, dim=0), nonzero(3, 4)),
    S("norm-inf", lambda x: x.norm(float("inf"), dim=1), distinct(3, 4) + 0.01),
    S("softmax-public", lambda x: minidl.softmax(x, dim=0), NC(rn(3, 4), "neg")),
    S("log_softmax-public", lambda x: minidl.log_softmax(x, dim=1), rn(2, 5)),
    S("einsum-matmul", lambda a, b: minidl.einsum("ij,jk->ik", a, b), rn(3, 4), rn(4, 2)),
    S("einsum-batched", lambda a, b: minidl.einsum("bij,bjk->bik", a, b), rn(2, 3, 4), NC(rn(2, 4, 2), "gap")),
    S("einsum-trace-diag", lambda a: minidl.einsum("ii->i", a), rn(3, 3)),
    S("einsum-sum", lambda a: minidl.einsum("ij->", a), rn(3, 4)),
    S("einsum-ellipsis-outer", lambda a, b: minidl.einsum("...i,j->...ij", a, b), rn(2, 3), rn(4)),
    S("einsum-implicit", lambda a, b: minidl.einsum("ij,kj", a, b), rn(3, 4), rn(2, 4)),
    S("einsum-three", lambda a, b, c: minidl.einsum("ij,jk,kl->il", a, b, c), rn(2, 3), rn(3, 4), rn(4, 2)),
    S("tril", lambda x: x.tril(), rn(4, 4)),
    S("tril-offset", lambda x: minidl.tril(x, -1), NC(rn(3, 4), "F")),
    S("triu", lambda x: x.triu(1), rn(3, 4)),
    S("triu-batched", lambda x: minidl.triu(x), rn(2, 3, 3)),
    S("roll", lambda x: x.roll(1, 1), rn(3, 4)),
    S("roll-flat", lambda x: minidl.roll(x, -2), NC(rn(3, 4), "F")),
    S("roll-multi", lambda x: x.roll((1, 2), (0, 1)), rn(3, 4)),
    S("repeat", lambda x: x.repeat(2, 3), rn(2, 3)),
    S("repeat-new-dims", lambda x: x.repeat(2, 1, 2), NC(rn(3, 2), "F")),
    S("flip", lambda x: x.flip(0), rn(3, 4)),
    S("flip-dims", lambda x: minidl.flip(x, (0, 1)), NC(rn(3, 4), "gap")),
    S("pad-public", lambda x: minidl.pad(x, (2, 1, 0, 1)), rn(2, 3)),
    S("getitem-adv-basic", lambda x: x[[0, 2], 1:3], rn(4, 5)),
    S("getitem-dup-cols", lambda x: x[:, [1, 0, 1]], NC(rn(3, 4), "F")),
    S("getitem-bool-mask", lambda x: x[const(_mask34)], rn(3, 4)),
    S("getitem-none-ellipsis", lambda x: x[None, ..., 1], rn(2, 3, 4)),
    S("getitem-nonadjacent", lambda x: x[[0, 1], :, [1, 2]], rn(2, 3, 4)),
    S("getitem-2d-index", lambda x: x[const([[0, 1], [2, 0]]), -1], rn(3, 4)),
    S("getitem-mask-row-slice", lambda x: x[1:, const([True, False, True, True])], NC(rn(3, 4), "neg")),
    S("getitem-negative-index-tensor", lambda x: x[const([-1, 0]), const([1, -2])], rn(3, 4)),
    S("setitem-nonleaf-advanced", _setitem_advanced, rn(3, 4), rn(2, 2), rn(3)),
    S("setitem-nonleaf-view", _setitem_view, NC(rn(3, 4), "F"), rn(2, 2)),
    S("masked_fill", lambda x: x.masked_fill(const(_mask34), 0.0), rn(3, 4)),
    S("masked_fill-tensor-value", lambda x, v: minidl.masked_fill(x, const(_mask34[0]), v), rn(3, 4), rn()),
    S("index_add", lambda x, s: x.index_add(0, const([0, 2, 0]), s), rn(3, 4), rn(3, 4)),
    S("index_add-alpha-dim1", lambda x, s: x.index_add(1, const([3, 1]), s, alpha=2.0), NC(rn(3, 4), "F"),
      rn(3, 2)),
    S("gather-dups", lambda x: minidl.gather(x, 0, const(_dup_idx)), rn(3, 3)),
    S("scatter-public", lambda x, s: minidl.scatter(x, 0, const([[2, 0, 1]]), s), rn(3, 3), rn(1, 3)),
    S("scatter-value", lambda x: x.scatter(1, const([[1], [0]]), value=2.0), rn(2, 3)),
    S("scatter_add-public", lambda x, s: minidl.scatter_add(x, 1, const(_dup_idx), s), NC(rn(2, 3), "F"), rn(2, 3)),
    S("index_select", lambda x: x.index_select(1, const([3, 0, 3])), rn(2, 4)),
    S("masked_select-broadcast", lambda x: x.masked_select(const(_mask34)), rn(4)),
    S("split", lambda x: x.split([1, 3], 1), rn(2, 4)),
    S("chunk", lambda x: x.chunk(2, 0), NC(rn(5, 2), "F")),
    S("outer", minidl.outer, rn(3), rn(4)),
    S("movedim", lambda x: x.movedim(0, -1), rn(2, 3, 4)),
    S("unflatten", lambda x: x.unflatten(1, (2, 2)), rn(3, 4)),
    S("mT", lambda x: x.mT @ x, rn(3, 2)),
    S("div-trunc", lambda a, b: minidl.div(a, b, rounding_mode="trunc"), frac(4) * 2, np.full(4, 2.0)),
    S("inplace-chain-nonleaf", lambda x, w: (x * 1).mul_(w).add_(x).exp_().clamp_(max=20.0), rn(3, 4),
      rn(4)),
    S("inplace-unary-on-view", lambda x: _tanh_row(x), rn(3, 4)),
    S("sigmoid-of-matmul-sum", lambda a, b: (a @ b).sigmoid().sum(0), rn(3, 4), rn(4, 2)),
    # the Tensor API beyond the basics (tests/test_tensor_api.py)
    S("sort-values", lambda x: x.sort(1).values, distinct(3, 4)),
    S("sort-descending-dim0", lambda x: minidl.sort(x, 0, descending=True)[0], NC(distinct(4, 3), "F")),
    S("topk", lambda x: x.topk(2, largest=False).values, distinct(3, 5)),
    S("msort", minidl.msort, NC(distinct(4, 2), "neg")),
    S("cdist-p2", lambda a, b: minidl.cdist(a, b), rn(2, 4, 3), rn(5, 3)),
    S("cdist-p2-matmul", lambda a, b: minidl.cdist(a, b, compute_mode="use_mm_for_euclid_dist"), rn(4, 3), rn(2, 3)),
    S("cdist-p1", lambda a, b: minidl.cdist(a, b, 1), rn(3, 2), rn(4, 2)),
    S("cdist-p3", lambda a, b: minidl.cdist(a, b, 3), rn(3, 2), rn(4, 2)),
    S("cdist-inf", lambda a, b: minidl.cdist(a, b, float("inf")), distinct(3, 2), distinct(2, 2) + 0.05),
    S("lerp-scalar-weights", lambda s, e: s.lerp(e, 0.3) + minidl.lerp(s, e, 0.8), rn(3, 4), rn(4)),
    S("lerp-tensor-weight", minidl.lerp, rn(3, 4), rn(3, 4), avoid((3, 4), [-0.5, 0.5])),
    S("addmm-beta-alpha", lambda x, a, b: minidl.addmm(x, a, b, beta=0.5, alpha=-2), rn(4), rn(3, 2), rn(2, 4)),
    S("baddbmm", lambda x, a, b: x.baddbmm(a, b, alpha=3), rn(2, 3, 4), NC(rn(2, 3, 2), "gap"), rn(2, 2, 4)),
    S("var_mean", lambda x: minidl.var_mean(x, 1, correction=0), rn(3, 4)),
    S("std_mean", lambda x: minidl.std_mean(x, (0, 2), keepdim=True), NC(rn(2, 3, 4), "gap")),
    S("diag-vector-offset", lambda v: minidl.diag(v, -1), rn(3)),
    S("diag-matrix", lambda m: m.diag(1), NC(rn(3, 4), "F")),
    S("trace", minidl.trace, rn(3, 4)),
    S("nan_to_num", lambda x: minidl.nan_to_num(x, posinf=2.0), np.array([[1.5, np.nan], [np.inf, -0.3]])),
    S("frac", minidl.frac, frac(3, 4)),
    S("round-decimals", lambda x: x.round(decimals=1) * x, frac(4) + 0.02),
    S("fmax-fmin", lambda a, b: minidl.fmax(a, b) + b.fmin(a) * 2, distinct(3, 4), distinct(4) + 0.1),
    S("addcmul-addcdiv", lambda x, a, b: minidl.addcmul(x, a, b, value=2) + x.addcdiv(a, b, value=-0.5), rn(3, 4),
      rn(4), nonzero(3, 4)),
    S("clamp_min-clamp_max", lambda x: minidl.clamp_min(x, -0.5) + x.clamp_max(0.5), avoid((3, 4), [-0.5, 0.5])),
    S("masked_scatter", lambda x, s: x.masked_scatter(const(_mask34), s), rn(3, 4), rn(12)),
    S("index_fill-value-tensor", lambda x, v: minidl.index_fill(x, 1, const([0, 2]), v), rn(3, 4), rn()),
    S("index_copy", lambda x, s: x.index_copy(0, const([2, 0]), s), rn(3, 4), NC(rn(2, 4), "F")),
    S("bincount-weights", lambda w: minidl.bincount(const([1, 3, 1, 0]), w), rn(4)),
    S("inplace-twins-nonleaf", lambda x, w: (x * 1).sin_().lerp_(w, 0.25).addcmul_(w, x).atan2_(w).square_(),
      rn(3, 4), pos(4)),
]


def _tanh_row(x):
    y = x * 2
    y[1].tanh_()
    return y


# ----------------------------------------------------------------------------- second order
GRADGRAD = [
    S("mul", lambda a, b: a * b, rn(3, 4), rn(4)),
    S("div", lambda a, b: a / b, rn(3), nonzero(3)),
    S("exp", minidl.exp, rn(3, 2)),
    S("tanh", minidl.tanh, rn(4)),
    S("sigmoid", minidl.sigmoid, NC(rn(3, 2), "F")),
    S("matmul", minidl.matmul, rn(2, 3), rn(3, 2)),
    S("sum", lambda x: (x.sum(1) ** 2), rn(3, 2)),
    S("softmax", lambda x: x.softmax(1), rn(2, 3)),
    S("log_softmax", lambda x: x.log_softmax(0), rn(3, 2)),
    S("pow", lambda a, b: a ** b, pos(3), rn(3)),
    S("getitem", lambda x: x[[0, 2, 2], 1:] ** 2, rn(3, 3)),
    S("prod-zeros", lambda x: x.prod(1), _pz),
    S("cumprod-zeros", lambda x: x.cumprod(1), _cpz),
    S("as_strided-overlapping", lambda x: x.as_strided((3, 3), (1, 1)) ** 2, rn(5)),
    S("norm-std", lambda x: x.norm(dim=1) + x.std(1), rn(2, 3)),
    S("setitem-nonleaf", _setitem_view, rn(3, 4), rn(2, 2)),
    S("conv2d", lambda x, w: _F.conv2d(x, w, padding=1, stride=2), rn(1, 1, 3, 3), rn(1, 1, 2, 2)),
    S("max_pool2d", lambda x: _F.max_pool2d(x, 2, stride=1) ** 2, distinct(1, 1, 3, 3)),
    S("max_pool2d-3", lambda x: _F.max_pool2d(x, 2) ** 3, NC(distinct(2, 1, 4, 4), "F")),
    S("conv2d-bias-groups", lambda x, w, b: _F.conv2d(x, w, b, groups=2) ** 2, rn(2, 2, 3, 3), rn(2, 1, 2, 2),
      rn(2)),
    S("atan2", minidl.atan2, rn(3), nonzero(3)),
    S("logaddexp", minidl.logaddexp, rn(2, 3), rn(3)),
    S("sort-cdist", lambda a, b: minidl.cdist(a, b).sort(1).values ** 2, rn(3, 2), rn(4, 2)),
]
