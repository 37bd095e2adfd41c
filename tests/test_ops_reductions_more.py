"""The order statistics, searches and extra reductions (minidl/ops/search.py, reduction_more.py) against
PyTorch where the corpus and the registry sweeps do not look: the index torch reports among tied values,
NaN rows, every quantile interpolation, the search options, errors that name the op, the ops without
gradient samples on 'cuda' (the simulator where there is no GPU), and the lowerings of the ops without
registry samples in ONNX Runtime."""
from __future__ import annotations

import io
import math

import numpy as np
import onnxruntime
import pytest

import minidl

from cuda_support import cuda  # noqa: F401  (the fixture)

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(44)


def ours(a):
    return minidl.tensor(a) if isinstance(a, np.ndarray) else a


def theirs(a):
    return torch.tensor(a) if isinstance(a, np.ndarray) else a


def same(got, want):
    """got (minidl: a tensor or a tuple of them) holds torch's values, dtypes and shapes."""
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
        return
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().cpu().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)


def ties(*shape, nan=False):
    """Small integers as float64, full of ties (and, with ``nan``, NaNs here and there)."""
    a = RNG.integers(0, 3, shape).astype(np.float64)
    if nan:
        a[RNG.random(shape) < 0.2] = np.nan
    return a


@pytest.mark.parametrize("name, args", [("median", ()), ("nanmedian", ()), ("kthvalue", (2,)),
                                        ("kthvalue", (5,)), ("mode", ())])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_tied_values_report_torchs_index(name, args, dim):
    """Which of several equal values is reported: torch's median takes the one a stable sort puts there,
    its kthvalue the one its quickselect leaves, its mode the last (rows of at most 16)."""
    for keepdim in (False, True):
        a = ties(5, 6, 7, nan=name != "mode")
        same(getattr(minidl, name)(ours(a), *args, dim, keepdim), getattr(torch, name)(theirs(a), *args, dim, keepdim))


def test_mode_reports_the_index_torchs_sort_leaves_last():
    """Past 16 elements torch's mode sorts with an unstable introsort, and NaNs (which compare false) shuffle
    even short rows: the index it reports is that order's."""
    rows = (ties(4, 40), RNG.integers(0, 10, (2, 3000)).astype(np.float64), ties(6, 5, nan=True), ties(2, 30, nan=True))
    for a in rows:
        for dim in (0, 1):
            same(minidl.mode(ours(a), dim), torch.mode(theirs(a), dim))


def test_median_of_all_and_its_gradient_shared_by_ties():
    for a in (ties(4, 5), ties(4, 5, nan=True), np.array([[np.nan, np.nan], [1.0, np.nan]])):
        for name in ("median", "nanmedian"):
            x, tx = minidl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
            y, ty = getattr(minidl, name)(x), getattr(torch, name)(tx)
            same(y, ty)
            (y * 3).backward()
            (ty * 3).backward()
            same(x.grad, tx.grad)


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_running_extremes_move_their_index_to_later_ties_and_nans(name):
    a = ties(4, 9, nan=True)
    for dim in (0, 1):
        x, tx = minidl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        got, want = getattr(minidl, name)(x, dim), getattr(torch, name)(tx, dim)
        same(got, want)
        g = RNG.standard_normal(a.shape)
        got.values.backward(minidl.tensor(g))
        want.values.backward(torch.tensor(g))
        same(x.grad, tx.grad)


def test_logcumsumexp_stays_finite_where_exp_overflows():
    a = np.array([[1000.0, -1000.0, 1000.0, 0.0], [-np.inf, -np.inf, 3.0, -np.inf]])
    same(minidl.logcumsumexp(ours(a), 1), torch.logcumsumexp(theirs(a), 1))


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantiles_in_every_interpolation_with_nan_rows(interpolation):
    a = RNG.standard_normal((4, 7))
    a[1, 3] = np.nan
    a[2] = np.nan
    q = np.array([0.0, 0.25, 0.5, 0.9, 1.0])
    for name in ("quantile", "nanquantile"):
        ours_fn, torch_fn = getattr(minidl, name), getattr(torch, name)
        same(ours_fn(ours(a), ours(q), 1, True, interpolation=interpolation),
             torch_fn(theirs(a), theirs(q), 1, True, interpolation=interpolation))
        same(ours_fn(ours(a), 0.3, 0, interpolation=interpolation),
             torch_fn(theirs(a), 0.3, 0, interpolation=interpolation))
        same(ours_fn(ours(a[0]), ours(q), interpolation=interpolation),
             torch_fn(theirs(a[0]), theirs(q), interpolation=interpolation))


def test_searchsorted_and_bucketize_options():
    seq = np.sort(RNG.integers(0, 6, (3, 8)), 1).astype(np.float64)
    values = RNG.integers(-1, 7, (3, 5)).astype(np.float64)
    sorter = np.argsort(seq[0][::-1], kind="stable")
    for kwargs in ({}, {"right": True}, {"side": "right"}, {"side": "left", "out_int32": True}):
        same(minidl.searchsorted(ours(seq), ours(values), **kwargs), torch.searchsorted(theirs(seq), theirs(values),
                                                                                      **kwargs))
        same(minidl.searchsorted(ours(seq[0]), ours(values), **kwargs),
             torch.searchsorted(theirs(seq[0]), theirs(values), **kwargs))
        same(minidl.searchsorted(ours(seq[0]), 3.0, **kwargs), torch.searchsorted(theirs(seq[0]), 3.0, **kwargs))
    same(minidl.searchsorted(ours(seq[0][::-1].copy()), ours(values), sorter=ours(sorter)),
         torch.searchsorted(theirs(seq[0][::-1].copy()), theirs(values), sorter=theirs(sorter)))
    for right in (False, True):
        same(minidl.bucketize(ours(values), ours(seq[1]), right=right),
             torch.bucketize(theirs(values), theirs(seq[1]), right=right))
    same(minidl.bucketize(2, ours(seq[1])), torch.bucketize(2, theirs(seq[1])))
    probes = np.array([np.nan, -1.0, 0.5, 2.0, 9.0])
    for boundaries in ([3.0, np.nan, 1.0, 2.0, np.nan, 0.0],    # (where torch's binary search ends all the same)
                       [1.0, 2.0, np.nan], [np.nan, 1.0, 2.0]):  # (NaN sorted last, as torch.sort puts it)
        for right in (False, True):
            same(minidl.searchsorted(ours(np.array(boundaries)), ours(probes), right=right),
                 torch.searchsorted(theirs(np.array(boundaries)), theirs(probes), right=right))
            same(minidl.bucketize(ours(probes), ours(np.array(boundaries)), right=right),
                 torch.bucketize(theirs(probes), theirs(np.array(boundaries)), right=right))


def test_isin_with_scalars_nan_and_invert():
    elements = np.array([[1.0, 2.0, np.nan], [4.0, 5.0, 2.0]])
    pool = np.array([2.0, np.nan, 5.0, 7.0])
    for invert in (False, True):
        same(minidl.isin(ours(elements), ours(pool), invert=invert),
             torch.isin(theirs(elements), theirs(pool), invert=invert))
    same(minidl.isin(ours(elements), 2.0), torch.isin(theirs(elements), 2.0))
    same(minidl.isin(5, ours(pool)), torch.isin(5, theirs(pool)))
    same(minidl.isin(ours(elements), ours(np.array([], dtype=np.float64))),
         torch.isin(theirs(elements), theirs(np.array([], dtype=np.float64))))
    ints = np.array([1, 2, 3])
    same(minidl.isin(ours(ints), ours(np.array([2.0, 3.5]))), torch.isin(theirs(ints), theirs(np.array([2.0, 3.5]))))


@pytest.mark.parametrize("elements, pool", [
    ([1.0, 3.0], [3.0, np.nan]),
    ([np.nan, 1.0, np.inf, -np.inf, 2.0], [np.nan, np.inf, 1.0, np.nan, np.nan]),
    ([np.inf, 7.0], [np.nan, np.nan]),
    ([0.0, np.nan, 4.0, np.nan], None)])      # None: the elements themselves
def test_isin_finds_matches_past_nans_in_the_pool(elements, pool):
    """The NaNs the sort puts last must not hide the other test elements; NaN itself matches nothing."""
    a = np.array(elements)
    b = a if pool is None else np.array(pool)
    for invert in (False, True):
        same(minidl.isin(ours(a), ours(b), invert=invert), torch.isin(theirs(a), theirs(b), invert=invert))


def test_unique_consecutive_argwhere_and_nonzero_static():
    a = np.array([[1, 1, 2], [1, 1, 2], [3, 1, 2], [3, 1, 2], [1, 1, 2]])
    for dim in (None, 0, 1):
        got = minidl.unique_consecutive(ours(a), return_inverse=True, return_counts=True, dim=dim)
        same(got, torch.unique_consecutive(theirs(a), return_inverse=True, return_counts=True, dim=dim))
    same(minidl.unique_consecutive(ours(a.ravel())), torch.unique_consecutive(theirs(a.ravel())))
    m = a == 1
    same(minidl.argwhere(ours(m)), torch.argwhere(theirs(m)))
    for size in (0, 3, 12):
        same(minidl.nonzero_static(ours(m), size=size, fill_value=-7),
             torch.nonzero_static(theirs(m), size=size, fill_value=-7))


def test_histogram_bins_range_weights_and_density():
    a = RNG.standard_normal(50)
    w = RNG.uniform(0, 2, 50)
    edges = np.array([-1.0, -0.2, 0.0, 0.5, 2.0])
    for bins in (7, edges):
        for kwargs in ({}, {"weight": w}, {"density": True}, {"range": (-0.5, 0.5), "weight": w, "density": True}):
            if not isinstance(bins, int) and "range" in kwargs:
                continue
            same(minidl.histogram(ours(a), ours(bins), **{k: ours(v) for k, v in kwargs.items()}),
                 torch.histogram(theirs(a), theirs(bins), **{k: theirs(v) for k, v in kwargs.items()}))
    same(minidl.histogram(ours(np.full(4, 2.0)), 3), torch.histogram(theirs(np.full(4, 2.0)), 3))


def test_covariance_weights_trapezoid_integers_and_nan_reductions():
    x = RNG.standard_normal((3, 6))
    f, w = np.array([1, 2, 1, 3, 1, 1]), RNG.uniform(0.5, 2, 6)
    same(minidl.cov(ours(x), correction=2, fweights=ours(f), aweights=ours(w)),
         torch.cov(theirs(x), correction=2, fweights=theirs(f), aweights=theirs(w)))
    same(minidl.corrcoef(ours(x[0])), torch.corrcoef(theirs(x[0])))
    y = RNG.integers(0, 9, (2, 5))
    same(minidl.trapezoid(ours(y)), torch.trapezoid(theirs(y)))
    same(minidl.trapezoid(ours(y), ours(np.arange(5))), torch.trapezoid(theirs(y), theirs(np.arange(5))))
    same(minidl.cumulative_trapezoid(ours(y), dx=3), torch.cumulative_trapezoid(theirs(y), dx=3))
    same(minidl.trapezoid(ours(np.zeros((2, 0)))), torch.trapezoid(theirs(np.zeros((2, 0)))))
    n = ties(3, 4, nan=True)
    same(minidl.nanmean(ours(n), 1), torch.nanmean(theirs(n), 1))
    same(minidl.nansum(ours(n)), torch.nansum(theirs(n)))
    same(minidl.aminmax(ours(n[0]), dim=0, keepdim=True), torch.aminmax(theirs(n[0]), dim=0, keepdim=True))
    same(minidl.renorm(ours(x), float("inf"), 1, 0.5), torch.renorm(theirs(x), float("inf"), 1, 0.5))
    same(ours(x).dist(ours(x[0]), 0), torch.dist(theirs(x), theirs(x[0]), 0))


@pytest.mark.parametrize("call, message", [
    (lambda: minidl.kthvalue(minidl.zeros(3, 4), 5, 1), r"kthvalue\(\).*out of range.*k = 5, size 4"),
    (lambda: minidl.median(minidl.zeros(3, 0), 1), r"median\(\).*dim 1.*non-zero size"),
    (lambda: minidl.quantile(minidl.zeros(3), 1.5), r"quantile\(\) q must be in the range \[0, 1\]"),
    (lambda: minidl.quantile(minidl.zeros(3, dtype=minidl.int64), 0.5), r"quantile\(\).*float or double.*int64"),
    (lambda: minidl.nanquantile(minidl.zeros(3), 0.5, interpolation="cubic"), r"nanquantile\(\) interpolation"),
    (lambda: minidl.searchsorted(minidl.zeros(2, 3), minidl.zeros(3, 1)), r"searchsorted\(\).*\[2, 3\].*\[3, 1\]"),
    (lambda: minidl.searchsorted(minidl.zeros(3), minidl.zeros(2), right=True, side="left"), r"searchsorted\(\)"),
    (lambda: minidl.bucketize(minidl.zeros(2), minidl.zeros(2, 2)), r"bucketize\(\): boundaries.*dim\(2\)"),
    (lambda: minidl.nanmean(minidl.zeros(2, dtype=minidl.int64)), r"nanmean\(\).*int64"),
    (lambda: minidl.cov(minidl.zeros(2, 2, 2)), r"cov\(\).*3 dimensions"),
    (lambda: minidl.renorm(minidl.zeros(2, 2), 0, 0, 1.0), r"renorm.*non-positive"),
    (lambda: minidl.logcumsumexp(minidl.zeros(2, dtype=minidl.int64), 0), r"logcumsumexp\(\).*int64"),
])
def test_bad_arguments_name_the_op(call, message):
    with pytest.raises((RuntimeError, ValueError, IndexError), match=message):
        call()


@pytest.mark.parametrize("call, message", [
    (lambda m: m.searchsorted(m.tensor(1.0), m.tensor([1.0])), r"searchsorted\(\): boundaries tensor should have "
                                                              r"positive dimension, but got 0 dimension"),
    (lambda m: m.histogram(m.zeros(5), 3, weight=m.ones(4)), r"histogram.*weight.*same shape.*\[5\].*\[4\]"),
    (lambda m: m.quantile(m.zeros(0, 4), 0.5, dim=-1), r"quantile\(\) input tensor must be non-empty"),
    (lambda m: m.nanquantile(m.zeros(0, 4), 0.5, dim=0), r"nanquantile\(\) input tensor must be non-empty"),
])
def test_refused_as_torch_refuses_naming_the_op(call, message):
    """torch raises on each of these; minidl must too, with the op's name, not a bare error from inside."""
    with pytest.raises(RuntimeError):
        call(torch)
    with pytest.raises(RuntimeError, match=message):
        call(minidl)


def test_renorm_in_place_writes_and_differentiates_as_torch():
    """Tensor.renorm_ (torch has it): the result lands in x itself, and the gradient flows through it."""
    a, g = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    results = []
    for m in (minidl, torch):
        leaf = m.tensor(a).requires_grad_(True)
        x = leaf * 2.0
        assert x.renorm_(2, 1, 1.5) is x
        (x * m.tensor(g)).sum().backward()
        results.append((x.detach(), leaf.grad))
    same(results[0], results[1])


@pytest.mark.parametrize("shape", [(3,), ()])
def test_renorm_refuses_fewer_than_two_dims_as_torch(shape):
    with pytest.raises(RuntimeError, match="renorm: input needs at least 2 dimensions"):
        torch.renorm(torch.ones(shape), 2, 0, 1.0)
    with pytest.raises(RuntimeError, match=f"renorm: input needs at least 2 dimensions, got {len(shape)} dimensions"):
        minidl.renorm(minidl.ones(shape), 2, 0, 1.0)


def test_the_ops_without_gradient_samples_agree_on_cuda(cuda):  # noqa: F811
    """searchsorted, isin, histogram, unique_consecutive and kthvalue's replayed ties on 'cuda' as on the CPU."""
    seq, values, a = np.sort(RNG.standard_normal(9)), RNG.standard_normal((3, 4)), ties(4, 6, nan=True)
    calls = [
        lambda d: minidl.searchsorted(minidl.tensor(seq, device=d), minidl.tensor(values, device=d), right=True),
        lambda d: minidl.isin(minidl.tensor(a, device=d), minidl.tensor([1.0, 5.0], device=d)),
        lambda d: minidl.histogram(minidl.tensor(values, device=d), 4),
        lambda d: minidl.unique_consecutive(minidl.tensor(a, device=d), return_counts=True, dim=1),
        lambda d: minidl.kthvalue(minidl.tensor(a, device=d), 3, 1),
        lambda d: minidl.mode(minidl.tensor(a, device=d), 0),
        lambda d: minidl.quantile(minidl.tensor(values, device=d), 0.4, 1, interpolation="nearest"),
    ]
    for call in calls:
        on_cpu, on_cuda = call("cpu"), call("cuda")
        for c, g in zip(on_cpu if isinstance(on_cpu, tuple) else (on_cpu,),
                        on_cuda if isinstance(on_cuda, tuple) else (on_cuda,)):
            assert g.device.type == "cuda"
            np.testing.assert_array_equal(g.cpu().numpy(), c.numpy())


@pytest.mark.parametrize("fn", [
    lambda s, v: minidl.searchsorted(s, v),
    lambda s, v: minidl.searchsorted(s, v, side="right", out_int32=True),
    lambda s, v: minidl.bucketize(v, s, right=True),
    lambda s, v: minidl.isin(v, s, invert=True),
    lambda s, v: minidl.argwhere(v > 2),
])
def test_search_lowerings_run_in_onnx_runtime(fn):
    s = minidl.tensor([0.0, 1.0, 2.0, 2.0, 4.0], dtype=minidl.float32)
    v = minidl.tensor([[2.0, -1.0, 4.0], [5.0, 1.5, 0.0]], dtype=minidl.float32)
    buffer = io.BytesIO()
    minidl.onnx.export(fn, (s, v), buffer, input_names=["s", "v"], output_names=["out"])
    session = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"s": s.numpy(), "v": v.numpy()})[0]
    want = fn(s, v).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_cov_without_degrees_of_freedom_warns_and_gives_nan():
    with pytest.warns(UserWarning, match="degrees of freedom"):
        assert math.isnan(float(minidl.cov(minidl.tensor([[1.0]]))))
