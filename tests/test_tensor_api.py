"""The Tensor API that scripts use beyond the basics: sorting and counting, the newer elementwise and
matrix ops, in-place twins, sampling. Oracles: numpy (on arbitrary strided views, tests/strategies.py),
closed forms, and PyTorch where it is installed. Gradients are checked by the op sweep (the samples
in the op declarations, run by tests/test_gradcheck.py)."""
import math

import numpy as np
import pytest
import strategies as S
from hypothesis import given
from hypothesis import strategies as st
from test_ops_numpy import check

import minidl
from minidl.layout import Layout

NAN, INF = math.nan, math.inf


def _torch():
    return pytest.importorskip("torch")


# ----------------------------------------------------------------------------- sorting
def _order(row, descending):
    """Stable sort order with NaN as the largest value: Python's stable sort on (NaN?, value) keys."""
    keys = [(math.isnan(v), v) if not descending else (not math.isnan(v), -v) for v in map(float, row)]
    return sorted(range(len(row)), key=lambda i: (keys[i][0], 0.0 if math.isnan(keys[i][1]) else keys[i][1]))


def sort_oracle(a, dim, descending):
    moved = np.moveaxis(a, dim, -1)
    rows = moved.reshape(-1, moved.shape[-1]) if moved.size else np.zeros((0, moved.shape[-1]))
    order = np.array([_order(r, descending) for r in rows], dtype=np.int64).reshape(moved.shape)
    return np.moveaxis(order, -1, dim)


@given(data=st.data())
def test_sort_argsort_topk_on_views(data):
    dtype = data.draw(st.sampled_from(["float32", "float64", "int64", "bool"]), label="dtype")
    case = data.draw(S.view_cases(dtype=dtype, min_dims=1), label="view")
    if dtype.startswith("float"):  # ties and NaNs, written through the base so the view keeps its strides
        tied = np.round(case.base_a * 2) / 2
        case.base_a[...] = np.where(np.abs(tied) > 2.5, np.nan, tied)
        case.base_t.copy_(minidl.tensor(case.base_a))
    t, a = case.t, case.a
    dim = data.draw(st.integers(-a.ndim, a.ndim - 1), label="dim")
    descending = data.draw(st.booleans(), label="descending")
    expected = sort_oracle(a, dim, descending)
    check(minidl.argsort(t, dim, descending=descending), expected)
    values, indices = t.sort(dim, descending=descending)
    check(indices, expected)
    check(values, np.take_along_axis(a, expected, dim))
    k = data.draw(st.integers(0, a.shape[dim]), label="k")
    top = minidl.topk(t, k, dim, largest=descending)
    first = np.take(expected, np.arange(k), axis=dim)
    check(top.indices, first)
    check(top.values, np.take_along_axis(a, first, dim))


def test_sort_family_special_cases():
    x = minidl.tensor([1.0, NAN, 0.0, 1.0, -INF, INF])
    assert x.sort().indices.tolist() == [4, 2, 0, 3, 5, 1]
    assert x.sort(descending=True, stable=True).indices.tolist() == [1, 5, 0, 3, 2, 4]
    assert x.argsort(descending=True).tolist() == [1, 5, 0, 3, 2, 4]
    assert minidl.msort(minidl.tensor([[3, 1], [2, 0]])).tolist() == [[2, 0], [3, 1]]
    zero_d = minidl.tensor(2.5).sort()
    assert zero_d.values.item() == 2.5 and zero_d.indices.item() == 0 and zero_d.indices.ndim == 0
    big = minidl.randn(300, 600)  # large enough for the threaded kernel
    check(big.argsort(1), np.argsort(big.numpy(), 1, kind="stable"))
    empty = minidl.zeros(3, 0).sort(1)
    assert empty.values.shape == (3, 0) and empty.indices.dtype is minidl.int64


def test_sort_family_against_torch():
    torch = _torch()
    rng = np.random.default_rng(1)
    a = np.round(rng.standard_normal((4, 7)), 1).astype(np.float32)
    a[1, 2] = a[3, 0] = np.nan
    x, tx = minidl.tensor(a), torch.tensor(a)
    for dim in (0, 1):
        for descending in (False, True):
            got, want = x.sort(dim, descending=descending), tx.sort(dim=dim, descending=descending, stable=True)
            np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
            np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
    for largest in (True, False):
        got, want = x.topk(3, 1, largest=largest), tx.topk(3, 1, largest=largest)
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())


@given(data=st.data())
def test_unique_on_views(data):
    dtype = data.draw(st.sampled_from(["float32", "int64", "bool"]), label="dtype")
    t, a = data.draw(S.views(dtype=dtype), label="view")
    if dtype == "float32":
        t, a = (t * 2).round(), np.round(a * 2)  # repeated values
    values, inverse, counts = minidl.unique(t, return_inverse=True, return_counts=True)
    want, want_inverse, want_counts = np.unique(a, return_inverse=True, return_counts=True)
    check(values, want)
    check(inverse, want_inverse.reshape(a.shape).astype(np.int64))
    check(counts, want_counts.astype(np.int64))


def test_unique_dims_and_nans():
    a = np.array([[1, 2, 1], [0, 5, 0], [1, 2, 1], [1, 0, 1]])
    for dim in (0, 1, -1):
        values, inverse, counts = minidl.tensor(a).unique(dim=dim, return_inverse=True, return_counts=True)
        want, want_inverse, want_counts = np.unique(a, axis=dim, return_inverse=True, return_counts=True)
        check(values, want)
        check(inverse, want_inverse.reshape(-1).astype(np.int64))
        check(counts, want_counts.astype(np.int64))
    check(minidl.unique(minidl.tensor(a[:, :0]), dim=0), np.zeros((1, 0), np.int64))
    values, inverse = minidl.unique(minidl.tensor([NAN, 1.0, NAN, 1.0]), return_inverse=True)
    np.testing.assert_array_equal(values.numpy(), [1.0, NAN, NAN])  # every NaN is its own value
    assert inverse.tolist() == [1, 0, 2, 0]
    assert minidl.unique(minidl.tensor(3)).tolist() == [3]


def test_unique_against_torch():
    torch = _torch()
    a = np.array([[3.0, NAN, 1.0], [1.0, 3.0, NAN]], dtype=np.float32)
    got = minidl.unique(minidl.tensor(a), return_inverse=True, return_counts=True)
    want = torch.unique(torch.tensor(a), return_inverse=True, return_counts=True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())


# ----------------------------------------------------------------------------- counting
@given(data=st.data())
def test_bincount(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    n = data.draw(st.integers(0, 30), label="n")
    minlength = data.draw(st.integers(0, 12), label="minlength")
    a = rng.integers(0, 9, n)
    x = minidl.tensor(a)[::-1]
    check(minidl.bincount(x, minlength=minlength), np.bincount(a[::-1], minlength=minlength).astype(np.int64))
    w = rng.standard_normal(n)
    check(x.bincount(minidl.tensor(w, dtype=minidl.float32), minlength=minlength),
          np.bincount(a[::-1], w, minlength=minlength).astype(np.float32))
    check(x.bincount(minidl.tensor(a)), np.bincount(a[::-1], a), np.float64)  # integer weights: float64


def test_histc():
    rng = np.random.default_rng(3)
    a = rng.uniform(-2, 3, 500).astype(np.float32)
    x = minidl.tensor(a)
    check(minidl.histc(x, bins=7, min=-1, max=2), np.histogram(a, 7, (-1, 2))[0].astype(np.float32))
    check(x.histc(5), np.histogram(a, 5, (a.min(), a.max()))[0].astype(np.float32))  # min == max: the data's range
    check(minidl.histc(minidl.tensor([1.0, 1.0]), bins=3), [0.0, 2.0, 0.0], np.float32)  # one value: [v-1, v+1]
    check(minidl.histc(minidl.tensor([0.0, 1.0, 2.0]), bins=2, min=0, max=2), [1.0, 2.0], np.float32)  # max: last bin


def test_histc_and_bincount_against_torch():
    torch = _torch()
    a = np.random.default_rng(4).standard_normal(200).astype(np.float64)
    np.testing.assert_array_equal(minidl.histc(minidl.tensor(a), 9, -1.5, 1.5).numpy(),
                                  torch.histc(torch.tensor(a), 9, -1.5, 1.5).numpy())
    idx = np.array([0, 4, 4, 1])
    assert minidl.bincount(minidl.tensor(idx)).tolist() == torch.bincount(torch.tensor(idx)).tolist()


# ----------------------------------------------------------------------------- elementwise
BINARY = {
    "atan2": (minidl.atan2, np.arctan2),
    "fmax": (minidl.fmax, np.fmax),
    "fmin": (minidl.fmin, np.fmin),
    "logaddexp": (minidl.logaddexp, np.logaddexp),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data())
def test_binary_on_broadcast_views(name, data):
    op, ref = BINARY[name]
    dtype = data.draw(st.sampled_from(["float32", "float64"]), label="dtype")
    (x, a), (y, b) = data.draw(S.broadcast_views([dtype, dtype]), label="views")
    check(op(x, y), ref(a, b))
    check(getattr(x, name)(y), ref(a, b))


def test_binary_special_values():
    a = np.array([0.0, -0.0, 0.0, -0.0, 1.0, INF, -INF, NAN, NAN, -INF, INF, 2.0])
    b = np.array([0.0, 0.0, -0.0, -0.0, -INF, INF, -INF, 1.0, NAN, 3.0, 5.0, NAN])
    x, y = minidl.tensor(a, dtype=minidl.float64), minidl.tensor(b, dtype=minidl.float64)
    np.testing.assert_array_equal(np.signbit(minidl.atan2(x, y).numpy()), np.signbit(np.arctan2(a, b)))
    for name in BINARY:
        with np.errstate(invalid="ignore"):
            check(BINARY[name][0](x, y), BINARY[name][1](a, b))
    check(minidl.atan2(minidl.tensor([1, -1]), minidl.tensor([0, 2])), np.arctan2([1, -1], [0, 2]), np.float32)


@given(data=st.data())
def test_lerp_on_broadcast_views(data):
    (s, a), (e, b), (w, c) = data.draw(S.broadcast_views(["float64"] * 3), label="views")
    check(minidl.lerp(s, e, w), a + c * (b - a))
    weight = data.draw(st.floats(-2, 2), label="scalar weight")
    check(s.lerp(e, weight), np.broadcast_to(a + weight * (b - a), np.broadcast_shapes(a.shape, b.shape)))
    assert minidl.lerp(minidl.tensor([0.1]), minidl.tensor([0.7]), 1.0).item() == np.float32(0.7)  # exact end


def test_rounding_family():
    v = np.array([0.5, 1.5, 2.5, -0.5, -2.7, 2.7, -0.0, NAN, INF, -INF, 12.25, 1234.5], dtype=np.float32)
    x = minidl.tensor(v)
    check(x.round(), np.round(v))                       # half to even
    with np.errstate(invalid="ignore"):                # inf - inf: NaN, as torch's frac gives
        check(x.frac(), v - np.trunc(v))
    check(minidl.round(minidl.tensor([1.25, 2.5, -0.75], dtype=minidl.float64), decimals=1), [1.2, 2.5, -0.8])
    check(minidl.round(minidl.tensor([1250.0, 1350.0, -50.0]), decimals=-2), [1200.0, 1400.0, -0.0], np.float32)
    check(x.sign(), np.nan_to_num(np.sign(v)))          # sign(nan) is 0, as in PyTorch
    assert minidl.tensor([3, -2, 0]).sign().tolist() == [1, -1, 0]
    for name in ("floor", "ceil", "trunc", "round"):
        check(getattr(x, name)(), getattr(np, name)(v))
        assert getattr(minidl.tensor([3, -2]), name)().dtype is minidl.int64


def test_rounding_family_against_torch():
    torch = _torch()
    v = np.array([0.5, 1.5, 2.5, -0.5, -2.7, NAN, INF, -0.0, 12.25, 1234.5, 0.125], dtype=np.float32)
    x, tx = minidl.tensor(v), torch.tensor(v)
    for name in ("floor", "ceil", "trunc", "round", "sign", "frac", "isnan", "isinf", "isfinite"):
        np.testing.assert_array_equal(getattr(x, name)().numpy(), getattr(tx, name)().numpy(), err_msg=name)
    for decimals in (-2, -1, 1, 2):
        np.testing.assert_array_equal(x.round(decimals=decimals).numpy(), tx.round(decimals=decimals).numpy())
    y = np.array([1.0, NAN, 3.0, -1.0, NAN], dtype=np.float32)
    z = np.array([NAN, 2.0, 1.0, -1.0, NAN], dtype=np.float32)
    for name in ("maximum", "minimum", "fmax", "fmin", "logaddexp", "atan2"):
        got = getattr(minidl, name)(minidl.tensor(y), minidl.tensor(z)).numpy()
        np.testing.assert_array_equal(got, getattr(torch, name)(torch.tensor(y), torch.tensor(z)).numpy())
    c = np.array([[1, 2], [3, 4]])
    assert minidl.tensor(c).cumprod(1).tolist() == torch.tensor(c).cumprod(1).tolist()


def test_nan_to_num():
    v = np.array([NAN, INF, -INF, 1.5, -0.0], dtype=np.float32)
    x = minidl.tensor(v)
    check(x.nan_to_num(), np.nan_to_num(v))
    check(minidl.nan_to_num(x, nan=7.0, posinf=1.0, neginf=-2.0), np.nan_to_num(v, nan=7.0, posinf=1.0, neginf=-2.0))
    check(minidl.tensor([1, 2]).nan_to_num(), np.array([1, 2]))


def test_isclose_allclose_equal():
    a = np.array([1.0, 1.0 + 1e-9, 1.0, INF, INF, -INF, NAN, NAN, 0.0, 1e-10])
    b = np.array([1.0, 1.0, 1.001, INF, -INF, 3.0, NAN, 1.0, 1e-9, 0.0])
    x, y = minidl.tensor(a, dtype=minidl.float64), minidl.tensor(b, dtype=minidl.float64)
    check(minidl.isclose(x, y), np.isclose(a, b))
    check(x.isclose(y, equal_nan=True), np.isclose(a, b, equal_nan=True))
    check(minidl.isclose(x, y, rtol=1e-2, atol=0.0), np.isclose(a, b, rtol=1e-2, atol=0.0))
    check(minidl.isclose(minidl.tensor([1, 2]), minidl.tensor([1, 3])), [True, False])
    assert minidl.allclose(x[:2], y[:2]) and not x.allclose(y)
    assert minidl.allclose(minidl.tensor([NAN]), minidl.tensor([NAN]), equal_nan=True)
    assert minidl.equal(minidl.tensor([1, 2]), minidl.tensor([1.0, 2.0]))
    assert not minidl.tensor([1, 2]).equal(minidl.tensor([[1, 2]]))
    assert not minidl.equal(minidl.tensor([NAN]), minidl.tensor([NAN]))


def test_addcmul_addcdiv_clamp_min_max():
    rng = np.random.default_rng(5)
    a, b, c = rng.standard_normal((3, 2, 3))
    x, y, z = (minidl.tensor(v, dtype=minidl.float64) for v in (a, b, c))
    check(minidl.addcmul(x, y, z, value=0.5), a + 0.5 * b * c)
    check(x.addcdiv(y, z), a + b / c)
    check(minidl.clamp_min(x, 0.1), np.maximum(a, 0.1))
    check(x.clamp_max(z), np.minimum(a, c))


# ----------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("dim,correction,keepdim", [(None, 1, False), (1, 0, True), ((0, 2), 2, False),
                                                    (-1, 1, True)])
def test_var_mean_std_mean(dim, correction, keepdim):
    a = np.random.default_rng(6).standard_normal((3, 4, 5))
    x = minidl.tensor(a, dtype=minidl.float64)
    axis = dim if dim is None or isinstance(dim, int) else tuple(dim)
    v, m = minidl.var_mean(x, dim, correction=correction, keepdim=keepdim)
    check(v, np.var(a, axis=axis, ddof=correction, keepdims=keepdim))
    check(m, np.mean(a, axis=axis, keepdims=keepdim))
    s, m = minidl.std_mean(x, dim, correction=correction, keepdim=keepdim)
    check(s, np.std(a, axis=axis, ddof=correction, keepdims=keepdim))
    check(m, np.mean(a, axis=axis, keepdims=keepdim))


def test_var_std_positional_unbiased():
    a = np.array([1.0, 2.0, 4.0, 7.0])
    x = minidl.tensor(a, dtype=minidl.float64)
    check(x.var(False), np.var(a))         # var(x, unbiased), the old positional form
    check(x.std(True), np.std(a, ddof=1))
    check(minidl.var_mean(x, 0, False)[0], np.var(a))


# ----------------------------------------------------------------------------- matrices and grids
def test_addmm_baddbmm():
    rng = np.random.default_rng(7)
    m, a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 5)), rng.standard_normal((5, 4))
    t = [minidl.tensor(v, dtype=minidl.float64) for v in (m, a, b)]
    check(minidl.addmm(*t), m + a @ b)
    check(t[0].addmm(t[1], t[2], beta=0.5, alpha=-2), 0.5 * m + -2 * (a @ b))
    check(minidl.addmm(t[0][0], t[1], t[2]), m[0] + a @ b)  # broadcast input
    nan = minidl.full((3, 4), NAN, dtype=minidl.float64)
    check(minidl.addmm(nan, t[1], t[2], beta=0), a @ b)      # beta 0: the input is not read
    bm, b1, b2 = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 2, 4))
    t = [minidl.tensor(v, dtype=minidl.float64) for v in (bm, b1, b2)]
    check(minidl.baddbmm(*t, beta=2, alpha=0.5), 2 * bm + 0.5 * (b1 @ b2))


def test_diag_trace():
    v = np.array([1.0, -2.0, 3.0])
    for k in (-2, 0, 1):
        check(minidl.diag(minidl.tensor(v), k), np.diag(v, k))
    m = np.arange(12.0).reshape(3, 4)
    for k in (-1, 0, 2, 5):
        out = minidl.tensor(m).diag(k)
        check(out, np.diag(m, k))
        assert out.is_contiguous()
    check(minidl.tensor(m).t().trace(), np.trace(m.T))
    assert minidl.tensor([[1, 2], [3, 4]]).trace().dtype is minidl.int64


@pytest.mark.parametrize("p", [0, 1, 2, 3, INF, 0.5])
@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                                  "donot_use_mm_for_euclid_dist"])
def test_cdist(p, mode):
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((2, 5, 3)), rng.standard_normal((4, 3))
    b[1] = a[0, 2]  # a zero distance
    diff = np.abs(a[:, :, None, :] - b[None, None, :, :])
    if p == 0:
        want = (diff != 0).sum(-1).astype(np.float64)
    elif p == INF:
        want = diff.max(-1)
    else:
        want = (diff ** p).sum(-1) ** (1 / p)
    got = minidl.cdist(minidl.tensor(a, dtype=minidl.float64), minidl.tensor(b, dtype=minidl.float64), p, mode)
    check(got, want, atol=1e-7)


def test_cdist_against_torch():
    torch = _torch()
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((30, 4)), rng.standard_normal((6, 4))  # 30 rows: the matrix-product form
    for p in (1.0, 2.0, 3.0):
        got = minidl.cdist(minidl.tensor(a, dtype=minidl.float64), minidl.tensor(b, dtype=minidl.float64), p)
        np.testing.assert_allclose(got.numpy(), torch.cdist(torch.tensor(a), torch.tensor(b), p).numpy(),
                                   rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
    xs = [np.arange(2), np.arange(3.0) / 2, np.array([5, 7, 9, 11])]
    got = minidl.meshgrid(*[minidl.tensor(v) for v in xs], indexing=indexing)
    for g, w in zip(got, np.meshgrid(*xs, indexing=indexing)):
        check(g, w)
    pair = minidl.meshgrid([minidl.tensor(xs[0]), minidl.tensor(xs[1])], indexing=indexing)
    for g, w in zip(pair, np.meshgrid(*xs[:2], indexing=indexing)):
        check(g, w)
    assert minidl.meshgrid(minidl.tensor(xs[0]), minidl.tensor(xs[1]))[0].shape == (2, 3)  # default 'ij'


# ----------------------------------------------------------------------------- indexing
def test_masked_scatter():
    rng = np.random.default_rng(10)
    a, src = rng.standard_normal((3, 4)), rng.standard_normal(20)
    mask = rng.random((3, 4)) < 0.5
    want = a.copy()
    want[mask] = src[:mask.sum()]
    check(minidl.tensor(a).masked_scatter(minidl.tensor(mask), minidl.tensor(src)), want)
    row_mask = np.array([True, False, True, True])  # broadcast over the rows
    want = a.copy()
    want[np.broadcast_to(row_mask, a.shape)] = src[:9]
    check(minidl.masked_scatter(minidl.tensor(a), minidl.tensor(row_mask), minidl.tensor(src).reshape(4, 5)), want)


def test_index_fill_index_copy():
    a = np.arange(12.0).reshape(3, 4)
    x = minidl.tensor(a)
    want = a.copy()
    want[:, [0, 2]] = -1
    check(x.index_fill(1, minidl.tensor([0, 2]), -1), want)
    check(minidl.index_fill(x, 1, minidl.tensor([0, 2]), minidl.tensor(-1.0)), want)
    src = np.array([[10.0, 11, 12, 13], [20, 21, 22, 23]])
    want = a.copy()
    want[[2, 0]] = src
    check(x.index_copy(0, minidl.tensor([2, 0]), minidl.tensor(src)), want)


# ----------------------------------------------------------------------------- in-place twins
rn = np.random.default_rng(11).standard_normal((3, 4))
_w = minidl.tensor(np.random.default_rng(12).uniform(0.1, 0.9, 4))
_idx = minidl.tensor([[0, 3], [1, 1], [2, 0]])
INPLACE = {  # name: arguments after self (self: 3x4, or the shape in SHAPES)
    "floor_": (), "ceil_": (), "round_": (), "trunc_": (), "frac_": (), "sign_": (), "reciprocal_": (),
    "rsqrt_": (), "square_": (), "sin_": (), "cos_": (), "tan_": (), "erf_": (), "expm1_": (), "log1p_": (),
    "exp_": (), "log_": (), "sqrt_": (), "tanh_": (), "sigmoid_": (), "relu_": (), "neg_": (), "negative_": (),
    "abs_": (), "absolute_": (), "atan_": (), "asin_": (), "acos_": (), "sinh_": (), "cosh_": (), "asinh_": (),
    "acosh_": (), "atanh_": (), "erfc_": (), "log2_": (), "log10_": (), "exp2_": (), "deg2rad_": (), "rad2deg_": (),
    "nan_to_num_": (), "clamp_min_": (0.2,), "clamp_max_": (-0.1,), "clamp_": (-0.5, 0.5), "clip_": (-0.2, 0.3),
    "lerp_": (minidl.ones(4), _w), "addcmul_": (_w, _w), "addcdiv_": (_w, _w),
    "add_": (_w,), "sub_": (_w,), "subtract_": (_w,), "mul_": (_w,), "multiply_": (_w,), "div_": (_w,),
    "divide_": (_w,), "true_divide_": (_w,), "pow_": (2,), "remainder_": (0.7,), "floor_divide_": (0.7,),
    "atan2_": (_w,), "arctan2_": (_w,), "masked_scatter_": (_w > 0.5, minidl.arange(12.0)),
    "masked_fill_": (_w > 0.5, 2.0), "index_fill_": (1, minidl.tensor([0, 3]), 2.0),
    "index_copy_": (0, minidl.tensor([2]), minidl.ones(1, 4)), "index_add_": (1, minidl.tensor([0, 3]), _w[:2].expand(3, 2)),
    "scatter_": (1, _idx, minidl.ones(3, 2)), "scatter_add_": (1, _idx, minidl.ones(3, 2)),
    "scatter_reduce_": (1, _idx, minidl.ones(3, 2, dtype=minidl.float64), "amax"),
    "index_reduce_": (1, minidl.tensor([0, 3]), minidl.full((3, 2), 2.0, dtype=minidl.float64), "prod"),
    "addmm_": (minidl.ones(3, 2), minidl.ones(2, 4)), "baddbmm_": (minidl.ones(2, 3, 2), minidl.ones(2, 2, 4)),
    # issue 44's elementwise math
    "erfinv_": (), "lgamma_": (), "digamma_": (), "i0_": (), "logit_": (), "sgn_": (), "sinc_": (), "mvlgamma_": (1,),
    "fmod_": (0.7,), "hypot_": (_w,), "copysign_": (-_w,), "xlogy_": (_w,), "nextafter_": (_w,), "igamma_": (_w,),
    "igammac_": (_w,), "float_power_": (2,), "ldexp_": (minidl.tensor([1, -2, 0, 3]),),
    "heaviside_": (minidl.tensor([0.5], dtype=minidl.float64),),
    "polygamma_": (1,), "renorm_": (2, 0, 0.5),
    "addmv_": (minidl.ones(5, 2), minidl.ones(2)), "addr_": (minidl.ones(3), minidl.ones(4)),
    "addbmm_": (minidl.ones(2, 3, 2), minidl.ones(2, 2, 4)),
}
SHAPES = {"baddbmm_": (2, 3, 4), "addmv_": (5,)}
POSITIVE = ("rsqrt_", "log1p_", "log_", "sqrt_", "log2_", "log10_", "mvlgamma_", "polygamma_")
DOMAINS = {"asin_": np.tanh, "acos_": np.tanh, "atanh_": np.tanh, "acosh_": lambda a: np.abs(a) + 1.1}


INTEGER_INPLACE = {  # the integer-only twins (self: 3x4 int64)
    "bitwise_and_": (6,), "bitwise_or_": (6,), "bitwise_xor_": (6,), "bitwise_left_shift_": (2,),
    "bitwise_right_shift_": (1,), "bitwise_not_": (), "gcd_": (6,), "lcm_": (6,),
}


def test_every_inplace_twin_of_the_registry_is_checked():
    declared = {twin for d in minidl.ops.registry.OPS.values() for twin in d.twins}
    checked = set(INPLACE) | set(INTEGER_INPLACE)
    assert declared == checked, f"declared but unchecked: {sorted(declared - checked)}"


@pytest.mark.parametrize("name", sorted(INTEGER_INPLACE))
def test_integer_inplace_twins(name):
    a = np.arange(-5, 7).reshape(3, 4)
    base = minidl.tensor(a)
    view = base[..., ::-1]
    expected = getattr(minidl.tensor(a[..., ::-1].copy()), name[:-1])(*INTEGER_INPLACE[name])
    version = view._version
    assert getattr(view, name)(*INTEGER_INPLACE[name]) is view and view._version > version
    check(base[..., ::-1], expected.numpy())


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_twins(name):
    args = INPLACE[name]
    a = np.resize(rn, SHAPES.get(name, rn.shape))
    a = np.abs(a) + 0.1 if name in POSITIVE else DOMAINS.get(name, lambda v: v)(a)
    base = minidl.tensor(a)
    view = base[..., ::-1]  # in place through a strided view, into the base's memory
    expected = getattr(minidl.tensor(a[..., ::-1].copy()), name[:-1])(*args)
    version = view._version
    out = getattr(view, name)(*args)
    assert out is view and view._version > version
    check(view, expected.numpy())
    check(base[..., ::-1], expected.numpy())
    leaf = minidl.tensor(a, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        getattr(leaf, name)(*args)


def test_inplace_twins_record_gradients():
    w = minidl.tensor(rn, dtype=minidl.float64, requires_grad=True)
    y = w * 1
    y.sin_().lerp_(minidl.ones(3, 4, dtype=minidl.float64), 0.25).clamp_min_(-0.5)
    y.sum().backward()
    a = rn
    s = np.sin(a)
    inner = 0.75 * s + 0.25
    np.testing.assert_allclose(w.grad.numpy(), np.where(inner >= -0.5, 0.75 * np.cos(a), 0.0), rtol=1e-12)
    with pytest.raises(RuntimeError, match="can't be cast"):
        minidl.tensor([1, 2]).sin_()


# ----------------------------------------------------------------------------- random sampling
def _chi_square(counts, expected):
    return float(((counts - expected) ** 2 / expected).sum())


CHI2_999 = {3: 16.266, 4: 18.467}  # the 0.999 quantiles of the chi-square law with 3 and 4 degrees of freedom


def test_multinomial_with_replacement_statistics():
    minidl.manual_seed(0)
    p = np.array([0.1, 0.0, 0.4, 0.2, 0.3, 0.0])
    draws = minidl.multinomial(minidl.tensor(p * 7), 20000, replacement=True)  # weights need not sum to 1
    assert draws.shape == (20000,) and draws.dtype is minidl.int64
    counts = np.bincount(draws.numpy(), minlength=6)
    assert counts[1] == counts[5] == 0
    assert _chi_square(counts[[0, 2, 3, 4]], 20000 * p[[0, 2, 3, 4]]) < CHI2_999[3]


def test_multinomial_without_replacement_statistics():
    minidl.manual_seed(1)
    p = np.array([0.5, 0.25, 0.125, 0.125, 0.0])
    rows = minidl.tensor(np.tile(p, (4000, 1)))
    draws = rows.multinomial(3).numpy()
    assert draws.shape == (4000, 3)
    assert all(len(set(r)) == 3 for r in draws) and not (draws == 4).any()
    # the first draw follows p; the second follows p without the first
    assert _chi_square(np.bincount(draws[:, 0], minlength=4), 4000 * p[:4]) < CHI2_999[3]
    second = np.zeros(4)
    for first in range(4):
        rest = np.delete(p[:4], first) / (1 - p[first])
        second += np.insert(rest, first, 0.0) * (draws[:, 0] == first).sum()
    observed = np.bincount(draws[:, 1], minlength=4)
    assert _chi_square(observed, second) < CHI2_999[3]


def test_sampling_is_seeded():
    probs = minidl.tensor([0.2, 0.5, 0.3])
    for draw in (lambda: minidl.multinomial(probs, 5, True), lambda: probs.bernoulli(),
                 lambda: minidl.zeros(6).exponential_(2.0), lambda: minidl.zeros(6).bernoulli_(probs[0])):
        minidl.manual_seed(7)
        first = draw().tolist()
        minidl.manual_seed(7)
        assert draw().tolist() == first
    g = minidl.Generator().manual_seed(3)
    once = minidl.multinomial(probs, 2, generator=g).tolist()
    assert minidl.multinomial(probs, 2, generator=minidl.Generator().manual_seed(3)).tolist() == once


def test_bernoulli_and_exponential_statistics():
    minidl.manual_seed(2)
    p = minidl.tensor([0.0, 0.1, 0.5, 0.9, 1.0]).expand(20000, 5)
    means = minidl.bernoulli(p).mean(0).numpy()
    np.testing.assert_allclose(means, [0.0, 0.1, 0.5, 0.9, 1.0], atol=4 * math.sqrt(0.25 / 20000))
    assert minidl.bernoulli(minidl.zeros(20000), p=0.3).mean().item() == pytest.approx(0.3, abs=0.015)
    x = minidl.empty(40000, dtype=minidl.float64).exponential_(lambd=4.0)
    assert x.min().item() >= 0
    assert x.mean().item() == pytest.approx(0.25, abs=0.01) and x.var().item() == pytest.approx(0.0625, abs=0.005)
    y = minidl.empty(20000).bernoulli_(minidl.tensor([0.2, 0.8]).repeat(10000))
    np.testing.assert_allclose(y.reshape(-1, 2).mean(0).numpy(), [0.2, 0.8], atol=0.02)


# ----------------------------------------------------------------------------- torch's Tensor helpers
def test_new_and_as_helpers_match_torch():
    torch = _torch()
    x, tx = minidl.tensor([[1.0, 2.0]], dtype=minidl.float64), torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    pairs = [(x.new_tensor([1, 2]), tx.new_tensor([1, 2])), (x.new_zeros(2, 3), tx.new_zeros(2, 3)),
             (x.new_ones((2,)), tx.new_ones((2,))), (x.new_full((2, 2), 3), tx.new_full((2, 2), 3)),
             (x.new_zeros(2, dtype=minidl.int64), tx.new_zeros(2, dtype=torch.int64)),
             (minidl.tensor([1, 2]).type_as(x), torch.tensor([1, 2]).type_as(tx)),
             (minidl.arange(2.0).view_as(x), torch.arange(2.0).view_as(tx)),
             (minidl.tensor([[3.0]]).expand_as(x), torch.tensor([[3.0]]).expand_as(tx)),
             (minidl.arange(2).reshape_as(x), torch.arange(2).reshape_as(tx)),
             (x.clone(), tx.clone())]
    for got, want in pairs:
        assert tuple(got.shape) == tuple(want.shape) and got.dtype.name == str(want.dtype).split(".")[1]
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert not x.new_tensor([1.0], requires_grad=False).requires_grad


# ----------------------------------------------------------------------------- errors
def _argsort_kernel(*args):
    return minidl.kernels.get("argsort", "cpu")(*args)


@pytest.mark.parametrize("call,error,match", [
    (lambda: minidl.arange(3.0).topk(4), RuntimeError, "topk: k \\(4\\) is out of range"),
    (lambda: minidl.arange(3.0).sort(1), IndexError, "sort: dimension out of range"),
    (lambda: minidl.bincount(minidl.tensor([1, -1])), RuntimeError, "bincount: .*negative"),
    (lambda: minidl.bincount(minidl.tensor([1.0])), RuntimeError, "bincount: expected a 1-D tensor"),
    (lambda: minidl.bincount(minidl.tensor([1]), minidl.ones(2)), RuntimeError, "bincount: weights"),
    (lambda: minidl.histc(minidl.tensor([1, 2])), RuntimeError, "histc: expected a floating point"),
    (lambda: minidl.histc(minidl.tensor([1.0, NAN])), RuntimeError, "histc: range of .* is not finite"),
    (lambda: minidl.histc(minidl.tensor([1.0]), 3, 2, 1), RuntimeError, "histc: max must be larger"),
    (lambda: minidl.multinomial(minidl.tensor([0.5, -0.1]), 1), RuntimeError, "multinomial: .*element < 0"),
    (lambda: minidl.multinomial(minidl.tensor([0.0, 0.0]), 1), RuntimeError, "multinomial: .*sum of prob"),
    (lambda: minidl.multinomial(minidl.tensor([0.5, 0.5]), 3), RuntimeError, "multinomial: cannot sample 3"),
    (lambda: minidl.multinomial(minidl.tensor([0.0, 0.5, 0.5]), 3), RuntimeError, "multinomial: fewer than 3"),
    (lambda: minidl.multinomial(minidl.ones(2, 2, 2), 1), RuntimeError, "multinomial: expected a 1-D or 2-D"),
    (lambda: minidl.bernoulli(minidl.tensor([1.5])), RuntimeError, "bernoulli: expected all probabilities"),
    (lambda: minidl.zeros(2).exponential_(0), RuntimeError, "exponential_: expects lambd > 0"),
    (lambda: minidl.diag(minidl.zeros(2, 2, 2)), RuntimeError, "diag: expected a 1-D or 2-D"),
    (lambda: minidl.trace(minidl.zeros(3)), RuntimeError, "trace: expected a matrix"),
    (lambda: minidl.addmm(minidl.zeros(2, 3, 4), minidl.zeros(3, 2), minidl.zeros(2, 4)), RuntimeError,
     "addmm: input of shape"),
    (lambda: minidl.cdist(minidl.zeros(3, 2), minidl.zeros(3, 4)), RuntimeError, "cdist: expected x1"),
    (lambda: minidl.cdist(minidl.zeros(3, 2), minidl.zeros(3, 2), -1), RuntimeError, "cdist: only supports"),
    (lambda: minidl.meshgrid(minidl.zeros(2, 2)), RuntimeError, "meshgrid: expected 0-D or 1-D"),
    (lambda: minidl.meshgrid(minidl.zeros(2), indexing="yx"), ValueError, "meshgrid: indexing"),
    (lambda: minidl.zeros(4).masked_scatter(minidl.ones(4) > 0, minidl.ones(3)), RuntimeError,
     "masked_scatter: source has 3 elements"),
    (lambda: minidl.zeros(2, 3).index_copy(0, minidl.tensor([0]), minidl.ones(2, 3)), RuntimeError,
     "index_copy: source of shape"),
    (lambda: minidl.zeros(3).index_fill(0, minidl.tensor([5]), 1.0), IndexError, "index 5 is out of bounds"),
    (lambda: minidl.tensor([1, 2]).frac(), RuntimeError, "frac: expected a floating point"),
    (lambda: minidl.tensor([1, 2]).round(decimals=1), RuntimeError, "round: decimals=1 needs"),
    (lambda: minidl.isclose(minidl.ones(1), minidl.ones(1), rtol=-1), RuntimeError, "isclose: rtol"),
    # the kernel wrapper checks what Numba would not
    (lambda: _argsort_kernel(np.zeros(3), Layout((3,)), 1, False, np.zeros(3, np.int64)), ValueError,
     "argsort: dim 1 is out of range"),
    (lambda: _argsort_kernel(np.zeros(4), Layout((4,)), 0, False, np.zeros(3, np.int64)), ValueError,
     "argsort: expected an int64 output of 4 elements"),
])
def test_errors_name_the_op(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("name", ["div_", "true_divide_", "atan2_", "__itruediv__"])
def test_true_division_into_an_integer_tensor_raises_as_in_pytorch(name):
    """int / int is a float: torch raises 'result type Float can't be cast to ... Long' in place."""
    import torch
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        getattr(torch.arange(4), name)(torch.arange(1, 5))
    t = minidl.arange(4)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type int64"):
        getattr(t, name)(minidl.arange(1, 5))
    assert t.tolist() == [0, 1, 2, 3]


def test_to_refuses_unknown_keywords_with_torch_error_type():
    torch = _torch()
    for m in (minidl, torch):
        with pytest.raises(TypeError, match="to()"):
            m.ones(2).to(m.float64, foo=1)


@pytest.mark.parametrize("shape,fmt", [((2, 3, 4, 5), "channels_last"), ((2, 1, 4, 5), "channels_last"),
                                       ((1, 3, 1, 1), "channels_last"), ((2, 3, 4, 5, 6), "channels_last_3d")])
def test_memory_formats_lay_out_strides_like_torch(shape, fmt):
    """channels_last is a real permuted-stride layout: the same values, torch's strides and contiguity."""
    torch = _torch()
    x = np.random.default_rng(0).standard_normal(shape)
    results = []
    for m in (minidl, torch):
        t = m.tensor(x)
        y = t.to(memory_format=getattr(m, fmt))
        back = y.to(memory_format=m.contiguous_format)
        results.append((t.is_contiguous(memory_format=getattr(m, fmt)), tuple(y.stride()), y.is_contiguous(),
                        y.is_contiguous(memory_format=getattr(m, fmt)), tuple(back.stride()),
                        tuple(t.contiguous(memory_format=getattr(m, fmt)).stride()),
                        tuple(t.clone(memory_format=getattr(m, fmt)).stride())))
        np.testing.assert_array_equal(y.numpy(), x)
    assert results[0] == results[1]


def test_channels_last_needs_a_4d_tensor():
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
        minidl.ones(3, 4).to(memory_format=minidl.channels_last)
    assert not minidl.ones(3, 4).is_contiguous(memory_format=minidl.channels_last)
