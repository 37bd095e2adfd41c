"""minidl against PyTorch on the same inputs: forward values, dtypes and gradients of a broad
set of ops, PyTorch's conventions at non-differentiable points, and type promotion."""
from __future__ import annotations

import itertools
import platform

import numpy as np
import pytest

import minidl

torch = pytest.importorskip("torch")

_rng = np.random.default_rng(7)


def rn(*shape):
    return _rng.standard_normal(shape)


def pos(*shape):
    return _rng.uniform(0.5, 2.0, shape)


def distinct(*shape):
    n = int(np.prod(shape))
    return (_rng.permutation(n) * 0.3 - 0.15 * n + _rng.uniform(-0.05, 0.05, n)).reshape(shape)


def nonzero(*shape):
    return _rng.choice([-1.0, 1.0], shape) * _rng.uniform(0.3, 2.0, shape)


DTYPES = {"float32": (minidl.float32, torch.float32), "float64": (minidl.float64, torch.float64)}


def lib_tensor(m, values, dtype=None):
    """A constant tensor of library ``m`` (index tensors, masks)."""
    return m.tensor(np.asarray(values)) if dtype is None else m.tensor(np.asarray(values), dtype=dtype)


def pad(m, x, pads, value=0.0):
    return minidl.pad(x, pads, value=value) if m is minidl else torch.nn.functional.pad(x, pads, value=value)


def T(m, values):
    return lib_tensor(m, values)


# (name, fn(lib, *inputs), input arrays); fn is written once against the common API
CASES = [
    # elementwise
    ("neg", lambda m, x: -x, [rn(3, 4)]),
    ("abs", lambda m, x: m.abs(x), [nonzero(3, 4)]),
    ("exp", lambda m, x: x.exp(), [rn(3, 4)]),
    ("log", lambda m, x: m.log(x), [pos(3, 4)]),
    ("log1p", lambda m, x: m.log1p(x), [pos(3, 4)]),
    ("expm1", lambda m, x: m.expm1(x), [rn(3, 4)]),
    ("sqrt", lambda m, x: x.sqrt(), [pos(3, 4)]),
    ("rsqrt", lambda m, x: m.rsqrt(x), [pos(3, 4)]),
    ("reciprocal", lambda m, x: x.reciprocal(), [nonzero(3, 4)]),
    ("sin-cos-tan", lambda m, x: x.sin() + x.cos() * m.tan(x), [rn(3, 4)]),
    ("tanh-sigmoid", lambda m, x: x.tanh() * m.sigmoid(x), [rn(3, 4) * 3]),
    ("relu", lambda m, x: m.relu(x), [nonzero(3, 4)]),
    ("erf", lambda m, x: m.erf(x), [rn(3, 4)]),
    ("square", lambda m, x: m.square(x), [rn(3, 4)]),
    ("floor-ceil-round-trunc", lambda m, x: x.floor() + 10 * x.ceil() + 100 * x.round() + 1000 * x.trunc(),
     [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -1.7, 0.2, 3.9])]),
    ("sign", lambda m, x: m.sign(x), [np.array([-2.0, 0.0, 3.0, -0.0])]),
    ("add-broadcast", lambda m, a, b: a + b, [rn(3, 4), rn(4)]),
    ("sub-alpha", lambda m, a, b: m.sub(a, b, alpha=2), [rn(3, 4), rn(3, 1)]),
    ("mul-div", lambda m, a, b: a * b / (b * b + 1), [rn(2, 3, 4), rn(3, 1)]),
    ("rdiv-rsub-rpow", lambda m, a: (2.0 / a) - (3.0 - a) + 2.0 ** a, [nonzero(3, 4)]),
    ("pow-tensor", lambda m, a, b: a ** b, [pos(3, 4), rn(3, 4)]),
    ("pow-scalar", lambda m, a: a ** 3 + a ** 0.5 * 0 + m.pow(a.abs(), 1.5), [nonzero(3, 4)]),
    ("maximum-minimum", lambda m, a, b: m.maximum(a, b) * 2 + m.minimum(a, b), [distinct(3, 4), distinct(4) + 0.1]),
    ("floor_divide-remainder", lambda m, a, b: (a // b).detach() * 100 + m.remainder(a, b),
     [np.array([7.5, -7.5, 7.5, -7.5, 0.3]), np.array([2.0, 2.0, -2.0, -2.0, 0.7])]),
    ("clamp", lambda m, x: x.clamp(-0.5, 0.5), [rn(3, 4)]),
    ("clamp-tensors", lambda m, x, lo: m.clamp(x, min=lo, max=lo + 1), [rn(3, 4), rn(4) - 0.5]),
    ("where", lambda m, a, b: m.where(a > b, a, b * 2), [distinct(3, 4), distinct(4) + 0.1]),
    ("where-scalar", lambda m, a: m.where(a > 0, a, 0.0), [nonzero(3, 4)]),
    # reductions
    ("sum", lambda m, x: x.sum(), [rn(3, 4)]),
    ("sum-dims", lambda m, x: x.sum((0, 2), keepdim=True), [rn(2, 3, 4)]),
    ("mean", lambda m, x: x.mean(1), [rn(3, 4)]),
    ("prod", lambda m, x: x.prod(1), [rn(3, 4)]),
    ("var-std", lambda m, x: x.var(1) + x.std(0, keepdim=True).sum() + m.var(x, 1, correction=0),
     [rn(3, 4)]),
    ("amax-amin", lambda m, x: x.amax(1) + x.amin(0).sum(), [distinct(3, 4)]),
    ("max-min-dim", lambda m, x: x.max(1).values * 2 + x.min(0, keepdim=True)[0].sum(), [distinct(3, 4)]),
    ("argmax-argmin", lambda m, x: (x.argmax(1), x.argmin(), x.argmax(0, keepdim=True)), [distinct(3, 4)]),
    ("cumsum-cumprod", lambda m, x: x.cumsum(1) + x.cumprod(0), [rn(3, 4)]),
    ("logsumexp", lambda m, x: m.logsumexp(x, 1), [rn(3, 4) * 5]),
    ("norm", lambda m, x: x.norm() + x.norm(1) + m.norm(x, 3, 1).sum() + x.norm(float("inf"), 0).sum(),
     [nonzero(3, 4)]),
    ("softmax", lambda m, x: m.softmax(x, 1), [rn(3, 4) * 3]),
    ("log_softmax", lambda m, x: m.log_softmax(x, 0), [rn(3, 4) * 3]),
    ("softmax-large", lambda m, x: x.softmax(-1) + x.log_softmax(-1), [np.array([[1000.0, 1001.0, 999.0]])]),
    ("any-all-count", lambda m, x: ((x > 0).any(1), (x > -5).all(), m.count_nonzero(x > 0, 0)), [rn(3, 4)]),
    # linear algebra
    ("matmul", lambda m, a, b: a @ b, [rn(3, 4), rn(4, 2)]),
    ("matmul-batched", lambda m, a, b: m.matmul(a, b), [rn(2, 1, 3, 4), rn(3, 4, 2)]),
    ("matmul-vectors", lambda m, a, b: (a @ b, b.t() @ a, a @ a), [rn(4), rn(4, 3)]),
    ("mm-bmm-dot-outer", lambda m, a, b, c: (m.mm(a, b), m.bmm(c, c.transpose(1, 2)), m.dot(a[0], a[1]),
                                              m.outer(a[0], b[:, 0])), [rn(2, 3), rn(3, 2), rn(2, 3, 2)]),
    ("einsum", lambda m, a, b: (m.einsum("ij,jk->ik", a, b), m.einsum("ij->j", a), m.einsum("ii", a @ b),
                                m.einsum("bi,bj->bij", a, b.t()), m.einsum("...j,kj->...k", a, b.t())),
     [rn(3, 4), rn(4, 3)]),
    # indexing
    ("getitem-basic", lambda m, x: (x[1], x[:, 1:3], x[..., None, 0], x[-1, ::2]), [rn(3, 4)]),
    ("getitem-advanced", lambda m, x: (x[[0, 2, 2]], x[:, [3, 0]], x[[0, 1], [2, 3]], x[1:, [0, 2]],
                                       x[T(m, [[0, 1], [2, 0]])]), [rn(3, 4)]),
    ("getitem-mask", lambda m, x: x[x > 0], [nonzero(3, 4)]),
    ("getitem-nonadjacent", lambda m, x: x[[0, 1], :, [1, 3]], [rn(2, 3, 4)]),
    ("gather", lambda m, x: x.gather(1, T(m, [[0, 0, 3], [1, 2, 1], [3, 3, 0]])), [rn(3, 4)]),
    ("scatter", lambda m, x, s: x.scatter(1, T(m, [[0, 2], [1, 3], [3, 0]]), s), [rn(3, 4), rn(3, 2)]),
    ("scatter-value", lambda m, x: x.scatter(0, T(m, [[1, 0, 2]]), value=-1.0), [rn(3, 3)]),
    ("scatter_add", lambda m, x, s: x.scatter_add(0, T(m, [[0, 1, 0], [0, 0, 1]]), s), [rn(2, 3), rn(2, 3)]),
    ("index_add", lambda m, x, s: x.index_add(0, T(m, [0, 2, 0]), s, alpha=2.0), [rn(3, 4), rn(3, 4)]),
    ("index_select", lambda m, x: x.index_select(1, T(m, [3, 0, 3])), [rn(2, 4)]),
    ("take", lambda m, x: m.take(x, T(m, [[5, 0], [11, -1]])), [rn(3, 4)]),
    ("masked_fill-select", lambda m, x: (x.masked_fill(x < 0, 0.5), x.masked_select(x > 0)), [nonzero(3, 4)]),
    ("nonzero", lambda m, x: (m.nonzero(x > 0), x.nonzero(as_tuple=True)), [np.array([[0.0, 1.0], [2.0, 0.0]])]),
    # shapes and views
    ("cat-stack", lambda m, a, b: (m.cat([a, b], 0), m.stack([a, a * 2], 1), m.cat([b.t(), b.t()], 1)),
     [rn(2, 3), rn(4, 3)]),
    ("split-chunk-unbind", lambda m, x: x.split([1, 2], 1) + x.chunk(2, 0) + x.unbind(1), [rn(4, 3)]),
    ("views", lambda m, x: (x.permute(2, 0, 1), x.transpose(0, 1), x.reshape(6, 4), x.view(-1, 2),
                            x.unsqueeze(1), x[:, :1].squeeze(1), x.flatten(), x.movedim(0, 2),
                            x.unflatten(2, (2, 2)), x.narrow(2, 1, 2), x.expand(2, 2, 3, 4)), [rn(2, 3, 4)]),
    ("diagonal-as_strided", lambda m, x: (x.diagonal(), x.diagonal(1), x.as_strided((2, 2), (1, 3), 1),
                                          x.as_strided((3, 3), (1, 1))), [rn(3, 4)]),
    ("flip-negative-strides", lambda m, x: (x.flip(0), x.flip((0, 1)) * x, m.flip(x.t(), [1])), [rn(3, 4)]),
    ("negative-step-slices-vs-flip", lambda m, x: (x[::-1] if m is minidl else x.flip(0),
                                                   x[:, ::-2] if m is minidl else x.flip(1)[:, ::2],
                                                   (x[::-1, 1:] if m is minidl else x.flip(0)[:, 1:]).sum(0)),
     [rn(3, 4)]),
    ("tril-triu", lambda m, x: (x.tril(), m.triu(x, 1), x.tril(-1)), [rn(4, 4)]),
    ("roll-repeat", lambda m, x: (x.roll(1, 1), m.roll(x, -2), x.roll((1, 2), (0, 1)), x.repeat(2, 1, 3)),
     [rn(3, 4)]),
    ("pad", lambda m, x: (pad(m, x, (1, 2)), pad(m, x, (1, 0, 2, 1), 0.5), pad(m, x, (-1, 2, 1, -1))),
     [rn(3, 4)]),
    ("clone-contiguous", lambda m, x: (x.t().clone(), x.t().contiguous() * 2), [rn(3, 4)]),
    ("to-dtype", lambda m, x: (x.to(m.float32) * 3).to(m.float64), [rn(3, 4)]),
    ("setitem-nonleaf", lambda m, x, v: _setitem(m, x, v), [rn(3, 4), rn(2, 2)]),
    ("inplace-nonleaf", lambda m, x, w: _inplace(m, x, w), [rn(3, 4), rn(4)]),
]


def _setitem(m, x, v):
    y = x * 1
    y[1:, ::2] = v
    y[T(m, [0]), 1] = 7.0
    y[:, -1] += v[0, 0]
    return y * x


def _inplace(m, x, w):
    y = x * 2
    y.mul_(w)
    y.t()[0].clamp_(-0.1, 0.1)
    y[1].exp_()
    z = y * 3  # y's exp'd row is saved by exp_ in torch: modify a new tensor
    return z.sigmoid_()


# PyTorch's conventions where ops are not differentiable
EDGE_CASES = [
    ("amax-ties-split", lambda m, x: x.amax(1), [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])]),
    ("max-all-ties-split", lambda m, x: x.max(), [np.array([[1.0, 3.0], [3.0, 0.0]])]),
    ("maximum-ties-half", lambda m, a, b: m.maximum(a, b) + m.minimum(a, b) * 3,
     [np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])]),
    ("abs-relu-sign-at-zero", lambda m, x: x.abs() + x.relu() * 2 + m.sign(x), [np.array([0.0, 1.0, -1.0])]),
    ("clamp-at-bounds", lambda m, x: x.clamp(-1.0, 1.0), [np.array([-1.0, 1.0, 0.0, 2.0])]),
    ("pow-at-zero", lambda m, x: x ** 2 + x ** 3, [np.array([0.0, 1.0])]),
    ("pow-zero-base-tensor-exponent", lambda m, a, b: a ** b, [np.array([0.0, 0.0, 2.0]), np.array([2.0, 0.5, 1.0])]),
    ("pow-zero-exponent-at-zero", lambda m, a, b: a ** 0 + a ** b, [np.array([0.0, 0.0, 2.0]), np.array([0.0, 2.0, 0.0])]),
    ("norm-std-of-zeros", lambda m, x: (x.norm(), x.norm(dim=1), x.std(1), x.norm(3, dim=1), x.norm(0.5)),
     [np.array([[0.0, 0.0, 0.0], [1.0, -2.0, 0.0]])]),
    ("prod-with-zeros", lambda m, x: x.prod(1) + x.prod(), [np.array([[1.0, 0.0, 3.0], [0.0, 0.0, 2.0]])]),
    ("cumprod-with-zeros", lambda m, x: x.cumprod(1), [np.array([[2.0, 0.0, 3.0, 4.0], [0.0, 5.0, 0.0, 1.0]])]),
    ("logsumexp-with-minus-inf", lambda m, x: m.logsumexp(x, 1), [np.array([[-np.inf, 0.0, 1.0], [2.0, 2.0, 2.0]])]),
    ("sigmoid-extremes", lambda m, x: x.sigmoid(), [np.array([-800.0, -30.0, 0.0, 30.0, 800.0])]),
    ("exp-log-extremes", lambda m, x: (x.exp(), (x.abs() + 0).log()), [np.array([-1000.0, 0.0, 1000.0])]),
]


def _to_numpy(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [o for item in out for o in _flat(item)]
    return [out]


def _run(case, dtype_name, check_grad=True):
    name, fn, arrays = case
    md, td = DTYPES[dtype_name]
    mx = [minidl.tensor(a, dtype=md, requires_grad=True) for a in arrays]
    tx = [torch.tensor(a, dtype=td, requires_grad=True) for a in arrays]
    mo, to = _flat(fn(minidl, *mx)), _flat(fn(torch, *tx))
    assert len(mo) == len(to)
    rtol, atol = (1e-10, 1e-12) if dtype_name == "float64" else (2e-5, 1e-6)
    for i, (a, b) in enumerate(zip(mo, to)):
        assert tuple(a.shape) == tuple(b.shape), f"{name}: output {i} shape {tuple(a.shape)} vs {tuple(b.shape)}"
        assert a.dtype.name == str(b.dtype).replace("torch.", ""), f"{name}: output {i} dtype {a.dtype} vs {b.dtype}"
        np.testing.assert_allclose(_to_numpy(a), _to_numpy(b), rtol=rtol, atol=atol,
                                   err_msg=f"{name}: forward output {i}")
    if not check_grad:
        return
    live = [(a, b) for a, b in zip(mo, to) if b.requires_grad]
    assert all(a.requires_grad for a, _ in live), f"{name}: minidl lost requires_grad"
    if not live:
        return
    cots = [_rng.standard_normal(tuple(b.shape)) for _, b in live]
    mg = minidl.autograd.grad([a for a, _ in live], mx, [minidl.tensor(c, dtype=md) for c in cots],
                              allow_unused=True)
    tg = torch.autograd.grad([b for _, b in live], tx, [torch.tensor(c, dtype=td) for c in cots],
                             allow_unused=True)
    for i, (a, b, arr) in enumerate(zip(mg, tg, arrays)):
        a = np.zeros(arr.shape) if a is None else _to_numpy(a)
        b = np.zeros(arr.shape) if b is None else _to_numpy(b)
        np.testing.assert_allclose(a, b, rtol=rtol * 10, atol=atol * 10, err_msg=f"{name}: gradient of input {i}")


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(case, dtype_name):
    _run(case, dtype_name)


@pytest.mark.parametrize("case", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_matches_torch_at_non_differentiable_points(case):
    _run(case, "float64")


def test_float64_math_keeps_python_scalars_exact():
    a = np.array([1.0, 3.0, 1e8])
    for f in (lambda x: x * 1.0001, lambda x: x + 0.1, lambda x: x / 3.3, lambda x: 0.7 - x, lambda x: x ** 1.1):
        np.testing.assert_array_equal(f(minidl.tensor(a, dtype=minidl.float64)).numpy(),
                                      f(torch.tensor(a, dtype=torch.float64)).numpy())


def test_integer_ops_match_torch():
    a = np.array([7, -7, 7, -7, 0, 5])
    b = np.array([2, 2, -2, -2, 3, 5])
    ma, mb, ta, tb = minidl.tensor(a), minidl.tensor(b), torch.tensor(a), torch.tensor(b)
    for f in (lambda x, y: x // y, lambda x, y: x % y, lambda x, y: x * y - y, lambda x, y: x / y,
              lambda x, y: (x > y) & (x != 0), lambda x, y: x.abs() + y.neg(), lambda x, y: x.sum() + y.prod(),
              lambda x, y: x.cumsum(0), lambda x, y: x.max()):
        mo, to = f(ma, mb), f(ta, tb)
        assert mo.dtype.name == str(to.dtype).replace("torch.", "")
        np.testing.assert_array_equal(mo.numpy(), to.numpy())


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="minidl's rule is PyTorch's result on x86; elsewhere PyTorch inherits the CPU's own")
@pytest.mark.parametrize("src", ["float16", "float32", "float64"])
def test_float_to_integer_casts_match_torch(src):
    """Out-of-range and NaN conversions too: minidl adopted PyTorch's x86 result as its rule."""
    from test_casts import EDGES
    values = np.array(EDGES * 3)  # 81 elements: vectorised bodies and their tails
    m, t = minidl.tensor(values).to(getattr(minidl, src)), torch.tensor(values).to(getattr(torch, src))
    for dst in ("bool", "uint8", "int16", "int32", "int64"):
        np.testing.assert_array_equal(m.to(getattr(minidl, dst)).numpy(), t.to(getattr(torch, dst)).numpy(),
                                      err_msg=f"{src} -> {dst}")


def test_python_numbers_that_do_not_fit_raise_like_torch():
    for lib in (minidl, torch):
        for make in (lambda: lib.tensor([65519.0], dtype=lib.int16), lambda: lib.tensor([-1.0], dtype=lib.uint8),
                     lambda: lib.tensor([-256], dtype=lib.uint8), lambda: lib.full((2,), 3e9, dtype=lib.int32),
                     lambda: lib.zeros(2, dtype=lib.int16).fill_(70000)):
            with pytest.raises(RuntimeError, match="cannot be converted to type"):
                make()
    for make in (lambda lib: lib.tensor([2.7, -2.7], dtype=lib.int32), lambda lib: lib.tensor([-1, -255], dtype=lib.uint8),
                 lambda lib: lib.full((2,), -128, dtype=lib.uint8)):
        assert make(minidl).tolist() == make(torch).tolist()


def _written(lib, value, dtype):
    """A number written into an integer tensor by each op that writes one."""
    x = lib.zeros(3, dtype=getattr(lib, dtype))
    x[0] = value
    x[lib.tensor([1])] = value
    return x.masked_fill(lib.tensor([False, False, True]), value).index_fill(0, lib.tensor([1]), value) \
        .scatter(0, lib.tensor([0]), value)


@pytest.mark.parametrize("dtype", ["uint8", "int16", "int32"])
def test_numbers_written_into_integer_tensors_fit_or_raise_like_torch(dtype):
    for value in (7, -1, 2.7, 255, -255, 70000, 3e9, float("nan")):
        try:
            expected = _written(torch, value, dtype).tolist()
        except RuntimeError:
            with pytest.raises(RuntimeError, match="cannot be converted to type"):
                _written(minidl, value, dtype)
            continue
        assert _written(minidl, value, dtype).tolist() == expected, value


def test_reductions_into_an_integer_dtype_convert_floats_by_the_rule_like_torch():
    values = np.array([3e9, 1.0, 2.7, -2.7])
    for dtype in ("int32", "int64"):
        assert minidl.tensor(values).sum(dtype=getattr(minidl, dtype)).item() == \
            torch.tensor(values).sum(dtype=getattr(torch, dtype)).item()


# ----------------------------------------------------------------------------- type promotion
DTYPE_NAMES = ["bool", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def _pair(name, ndim):
    value = [1] * 2 if ndim else 1
    return (minidl.tensor(value, dtype=getattr(minidl, name if name != "bool" else "bool")),
            torch.tensor(value, dtype=getattr(torch, name)))


@pytest.mark.parametrize("b_ndim", [1, 0], ids=["dims", "zero_dim"])
@pytest.mark.parametrize("a_name", DTYPE_NAMES)
def test_promotion_grid_matches_torch(a_name, b_ndim):
    ma, ta = _pair(a_name, 1)
    for b_name in DTYPE_NAMES:
        mb, tb = _pair(b_name, b_ndim)
        expected = str(torch.result_type(ta, tb)).replace("torch.", "")
        assert minidl.result_type(ma, mb).name == expected, (a_name, b_name, b_ndim)
        assert minidl.result_type(mb, ma).name == expected, (b_name, a_name, b_ndim)
        assert (ma * mb).dtype.name == str((ta * tb).dtype).replace("torch.", ""), ("mul", a_name, b_name)
        assert minidl.promote_types(ma.dtype, mb.dtype).name == \
            str(torch.promote_types(ta.dtype, tb.dtype)).replace("torch.", "")


@pytest.mark.parametrize("scalar", [True, 3, 2.5], ids=["bool", "int", "float"])
@pytest.mark.parametrize("a_name", DTYPE_NAMES)
def test_promotion_with_python_scalars_matches_torch(a_name, scalar):
    for ndim in (1, 0):
        ma, ta = _pair(a_name, ndim)
        expected = str(torch.result_type(ta, scalar)).replace("torch.", "")
        assert minidl.result_type(ma, scalar).name == expected, (a_name, scalar, ndim)
        if a_name != "bool" or not isinstance(scalar, bool):
            assert (ma * scalar).dtype.name == str((ta * scalar).dtype).replace("torch.", ""), (a_name, scalar)
            assert (scalar * ma).dtype.name == str((scalar * ta).dtype).replace("torch.", ""), (a_name, scalar)


@pytest.mark.parametrize("a_name", ["bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"])
def test_true_division_dtypes_match_torch(a_name):
    ma, ta = _pair(a_name, 1)
    for b_name in ("int64", "float32", "float64"):
        mb, tb = _pair(b_name, 1)
        assert (ma / mb).dtype.name == str((ta / tb).dtype).replace("torch.", "")
    assert (ma / 2).dtype.name == str((ta / 2).dtype).replace("torch.", "")


def test_default_dtype_changes_promotion_like_torch():
    minidl.set_default_dtype(minidl.float64)
    torch.set_default_dtype(torch.float64)
    try:
        for make_m, make_t in ((lambda: minidl.tensor([1, 2]) / 2, lambda: torch.tensor([1, 2]) / 2),
                               (lambda: minidl.tensor([1.5]), lambda: torch.tensor([1.5])),
                               (lambda: minidl.tensor([1]) * 2.5, lambda: torch.tensor([1]) * 2.5),
                               (lambda: minidl.arange(3) * 0.5, lambda: torch.arange(3) * 0.5)):
            assert make_m().dtype.name == str(make_t().dtype).replace("torch.", "")
    finally:
        minidl.set_default_dtype(minidl.float32)
        torch.set_default_dtype(torch.float32)


def test_mixed_dtype_ops_match_torch_values():
    rng = np.random.default_rng(5)
    for a_name, b_name in itertools.product(["int32", "int64", "float32", "float64"], repeat=2):
        a = (rng.standard_normal(4) * 10).astype(getattr(np, a_name))
        b = (rng.uniform(1, 5, 4)).astype(getattr(np, b_name))
        ma, mb = minidl.tensor(a), minidl.tensor(b)
        ta, tb = torch.tensor(a), torch.tensor(b)
        for f in (lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x / y, lambda x, y: minidl_or_torch_max(x, y)):
            mo, to = f(ma, mb), f(ta, tb)
            assert mo.dtype.name == str(to.dtype).replace("torch.", ""), (a_name, b_name)
            np.testing.assert_allclose(mo.numpy().astype(np.float64), to.numpy().astype(np.float64), rtol=1e-6)


def minidl_or_torch_max(x, y):
    return minidl.maximum(x, y) if isinstance(x, minidl.Tensor) else torch.maximum(x, y)


def test_clamp_with_min_above_max_sends_the_gradient_to_max_like_torch():
    """Where min > max the result is max, so only max gets the gradient (and equal bounds too)."""
    grads = []
    for m in (minidl, torch):
        x = m.tensor([0.0, 0.7, 2.0, 0.5, 3.0], dtype=m.float64, requires_grad=True)
        lo = m.tensor([1.0, 1.0, 1.0, 0.5, 0.5], dtype=m.float64, requires_grad=True)
        hi = m.tensor([0.5, 0.5, 0.5, 0.5, 0.5], dtype=m.float64, requires_grad=True)
        out = m.clamp(x, lo, hi)
        (out * m.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=m.float64)).sum().backward()
        grads.append([out.detach().numpy(), x.grad.numpy(), lo.grad.numpy(), hi.grad.numpy()])
    for got, ref in zip(*grads):
        np.testing.assert_array_equal(got, ref)


def test_index_fill_with_a_repeated_index_counts_the_value_gradient_once_like_torch():
    grads, x0 = [], rn(2, 5)
    for m in (minidl, torch):
        v = m.tensor(2.0, dtype=m.float64, requires_grad=True)
        x = m.tensor(x0, requires_grad=True)
        out = x.index_fill(1, m.tensor([4, 3, 3]), v)
        (out * m.tensor(np.arange(10.0).reshape(2, 5))).sum().backward()
        grads.append([out.detach().numpy(), v.grad.numpy(), x.grad.numpy()])
    for got, ref in zip(*grads):
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16"])
@pytest.mark.parametrize("args", [(4.3, -3, 8), (-2.5, 7.9, 7), (0, 1, 5), (0, 10, 4), (1, 2, 1), (0, 1, 0)])
def test_linspace_in_integer_dtypes_matches_torch(dtype, args):
    got = minidl.linspace(*args, dtype=getattr(minidl, dtype))
    ref = torch.linspace(*args, dtype=getattr(torch, dtype))
    assert got.dtype is getattr(minidl, dtype)
    assert got.tolist() == ref.tolist()


@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("args", [(0.0, -8.000001, -4.0), (0.5, 5.6, 1.5), (-0.5, 3, 1), (5, 0.2, -1.5),
                                  (0, 1e-9, 1), (0.0, 5.0, 1.9)])
def test_arange_in_integer_dtypes_matches_torch(dtype, args):
    got = minidl.arange(*args, dtype=getattr(minidl, dtype))
    assert got.tolist() == torch.arange(*args, dtype=getattr(torch, dtype)).tolist()


def test_arange_step_that_truncates_to_zero_is_refused():
    with pytest.raises(RuntimeError, match="arange: step 0.5 truncates to 0 in int64"):
        minidl.arange(0, 5, 0.5, dtype=minidl.int64)


@pytest.mark.parametrize("alpha,beta", [(2.5, 1.5), (-2.5, -1.5), (1.5, 0.5)])
def test_baddbmm_and_addmm_on_integers_truncate_alpha_and_beta_like_torch(alpha, beta):
    a, b, c = np.arange(24).reshape(2, 3, 4), np.arange(16).reshape(2, 4, 2), np.arange(12).reshape(2, 3, 2) - 5
    got = minidl.baddbmm(minidl.tensor(c), minidl.tensor(a), minidl.tensor(b), beta=beta, alpha=alpha)
    ref = torch.baddbmm(torch.tensor(c), torch.tensor(a), torch.tensor(b), beta=beta, alpha=alpha)
    assert got.dtype is minidl.int64 and got.tolist() == ref.tolist()
    got = minidl.addmm(minidl.tensor(c[0]), minidl.tensor(a[0]), minidl.tensor(b[0]), beta=beta, alpha=alpha)
    ref = torch.addmm(torch.tensor(c[0]), torch.tensor(a[0]), torch.tensor(b[0]), beta=beta, alpha=alpha)
    assert got.dtype is minidl.int64 and got.tolist() == ref.tolist()
