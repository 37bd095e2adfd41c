"""CUDA reduce, arg_reduce, scan, argsort and softmax primitives against the CPU's, called directly on
views with offsets, negative and zero strides (on the simulator where there is no GPU: see
cuda_support.py). Sizes are chosen to cross each path of the kernels: a warp or a block per output,
threads along outputs, several elements per thread, more outputs than the grid, the two-pass split,
argsort's merges of sorted tiles."""
import numpy as np
import pytest

import minidl
from minidl import kernels
from minidl.kernels.cuda import runtime
from minidl.kernels.cuda.primitives import reduce as cuda_reduce

from cuda_support import cuda_device

DTYPES = [minidl.float32, minidl.float64, minidl.int64]


@pytest.fixture(scope="module", autouse=True)
def cuda():
    return cuda_device()


@pytest.fixture
def many_chunks(monkeypatch):
    """Split every reduction with few outputs into many chunks (small data reaches the two-pass path)."""
    monkeypatch.setattr(cuda_reduce, "MIN_PER_LANE", 1)
    monkeypatch.setattr(runtime.get(), "max_blocks", 8)


# views of a (5, 6, 7) base: name -> the view taken on either device
VIEWS = {
    "packed": lambda b: b,
    "offset": lambda b: b[1:, 2:, 1:],
    "negative": lambda b: b[::-1, :, ::-2],
    "permuted": lambda b: b.permute(2, 0, 1),
    "broadcast": lambda b: b[:, :1, :].expand(5, 6, 7),
}


def data(rng, shape, dtype, low=-3.0, high=3.0):
    if dtype is minidl.int64:
        return rng.integers(int(low), int(high) + 1, shape)
    return rng.uniform(low, high, shape)


def both(array, dtype):
    cpu = minidl.tensor(array, dtype=dtype)
    return cpu, cpu.to("cuda")


def call(name, device, *args):
    """The primitive on one device; tensors among args become (buffer, layout)."""
    flat = []
    for a in args:
        flat.extend((a._storage.buf, a._layout) if isinstance(a, minidl.Tensor) else (a,))
    return kernels.get(name, device)(*flat)


def reduce_both(op, c, g, dims):
    kept = [n for d, n in enumerate(c.shape) if d not in dims]
    expected, got = minidl.empty(kept, dtype=c.dtype), minidl.empty(kept, dtype=g.dtype, device="cuda")
    call("reduce", "cpu", op, c, dims, expected._storage.buf)
    call("reduce", "cuda", op, g, dims, got._storage.buf)
    return expected.numpy(), got.cpu().numpy()


def check(expected, got, dtype, what, atol=1e-12):
    """Equal for int64, close for floats (``atol``: the CPU's float32 scans round at every step, the
    GPU's run in float64)."""
    if dtype is minidl.int64:
        np.testing.assert_array_equal(got, expected, err_msg=what)
    else:
        rtol = 2e-6 if dtype is minidl.float32 else 1e-12
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


# ----------------------------------------------------------------------------- reduce
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", kernels.REDUCE_OPS)
def test_reduce_matches_cpu_on_views(op, dtype, rng):
    low, high = ((0.5, 1.5) if dtype is not minidl.int64 else (-1, 1)) if op == "prod" else (-3, 3)
    c, g = both(data(rng, (5, 6, 7), dtype, low, high), dtype)
    for name, view in VIEWS.items():
        for dims in [(0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2)]:
            expected, got = reduce_both(op, view(c), view(g), dims)
            check(expected, got, dtype, f"{op} over {dims} of a {name} view")


@pytest.mark.parametrize("shape, dims", [((3, 2000), (1,)),         # a block per output, 8 elements per thread
                                         ((41, 9), (1,)),           # 16 lanes per output, more outputs than the grid
                                         ((3000, 3), (0,)),         # threads along 3 outputs, split over 2 chunks
                                         ((100, 70), (0,)),         # threads along the outputs, 8 lanes each
                                         ((9000,), (0,)),           # a full reduction split in two passes
                                         ((2, 3, 1500), (0, 2))])   # reduced dims that do not merge
@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_paths(shape, dims, dtype, rng):
    c, g = both(data(rng, shape, dtype), dtype)
    for op in ("sum", "max", "min"):
        check(*reduce_both(op, c, g, dims), dtype, f"{op} over {dims} of {shape}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_two_pass_over_many_chunks(dtype, rng, many_chunks):
    low, high = (0.9, 1.1) if dtype is not minidl.int64 else (-1, 1)
    c, g = both(data(rng, (5, 6, 7), dtype, low, high), dtype)
    for op in kernels.REDUCE_OPS:
        for name, view in VIEWS.items():
            for dims in [(0,), (2,), (0, 2), (0, 1, 2)]:
                check(*reduce_both(op, view(c), view(g), dims), dtype, f"{op} over {dims} of a {name} view")


def test_float32_sums_accumulate_in_float64():
    values = np.full(5000, 0.1, np.float32)
    values[0] = 1e8
    c, g = both(values, minidl.float32)
    expected, got = reduce_both("sum", c, g, (0,))
    np.testing.assert_array_equal(got, expected)
    assert got == np.float32(np.float64(1e8) + 4999 * np.float64(np.float32(0.1)))


def test_max_min_and_sum_propagate_nan():
    array = np.arange(60, dtype=np.float64).reshape(3, 20)
    array[1, 5] = np.nan
    array[2, 19] = np.nan
    for dtype in (minidl.float32, minidl.float64):
        c, g = both(array, dtype)
        for op in kernels.REDUCE_OPS:
            for dims in [(0,), (1,), (0, 1)]:
                expected, got = reduce_both(op, c, g, dims)
                check(expected, got, dtype, f"{op} over {dims}")
                assert np.isnan(got).sum() == np.isnan(expected).sum() > 0


def test_empty_reductions_give_identities():
    for shape, dims in [((3, 0), (1,)), ((0,), (0,)), ((0, 4), (0,)), ((0, 4), (1,))]:
        for op, identity in (("sum", 0), ("prod", 1)):
            c, g = both(np.zeros(shape), minidl.float32)
            expected, got = reduce_both(op, c, g, dims)
            assert got.shape == expected.shape and (got == identity).all(), (shape, dims, op)


def test_reduce_rejects_a_wrong_output():
    g = minidl.zeros(3, 4, device="cuda")
    with pytest.raises(ValueError, match="reduce"):
        kernels.get("reduce", "cuda")("sum", g._storage.buf, g._layout, (1,), minidl.zeros(4, device="cuda")._storage.buf)
    b = minidl.zeros(3, dtype=minidl.bool, device="cuda")
    with pytest.raises(TypeError, match="reduce"):
        kernels.get("reduce", "cuda")("sum", b._storage.buf, b._layout, (0,), b._storage.buf[:1])


# ----------------------------------------------------------------------------- arg_reduce
def arg_both(op, c, g, dim):
    kept = [n for d, n in enumerate(c.shape) if d != dim]
    expected = minidl.empty(kept, dtype=minidl.int64)
    got = minidl.empty(kept, dtype=minidl.int64, device="cuda")
    call("arg_reduce", "cpu", op, c, dim, expected._storage.buf)
    call("arg_reduce", "cuda", op, g, dim, got._storage.buf)
    return expected.numpy(), got.cpu().numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", kernels.ARG_REDUCE_OPS)
def test_arg_reduce_matches_cpu_with_ties(op, dtype, rng):
    c, g = both(rng.integers(-2, 3, (5, 6, 7)), dtype)  # many ties: the first index wins
    for name, view in VIEWS.items():
        for dim in range(3):
            expected, got = arg_both(op, view(c), view(g), dim)
            np.testing.assert_array_equal(got, expected, err_msg=f"{op} along {dim} of a {name} view")


@pytest.mark.parametrize("op", kernels.ARG_REDUCE_OPS)
def test_arg_reduce_paths_and_nan(op, rng, many_chunks):
    array = rng.integers(-50, 50, (3, 700)).astype(np.float64)
    array[1, [100, 40, 600]] = np.nan  # the first NaN wins
    array[2, :] = 7.0                  # all tied: index 0
    for dtype in (minidl.float32, minidl.float64):
        c, g = both(array, dtype)
        for view in (lambda t: t, lambda t: t.t(), lambda t: t.reshape(-1)):
            for dim in range(view(c).ndim):
                expected, got = arg_both(op, view(c), view(g), dim)
                np.testing.assert_array_equal(got, expected, err_msg=f"{op} along {dim}")
    assert arg_both(op, c, g, 1)[1][1] == 40


def test_arg_reduce_two_pass_full_length(rng):
    array = rng.integers(-1000, 1000, 9000)
    array[[4000, 8000]] = 5000
    c, g = both(array, minidl.int64)
    assert arg_both("argmax", c, g, 0)[1] == 4000
    check(*arg_both("argmin", c, g, 0), minidl.int64, "argmin")


# ----------------------------------------------------------------------------- scan
def scan_both(op, c, g, dim, out_view=lambda t: t):
    expected = minidl.empty(c.shape, dtype=c.dtype)
    got = out_view(minidl.empty(c.shape, dtype=g.dtype, device="cuda"))
    call("scan", "cpu", op, c, dim, expected)
    call("scan", "cuda", op, g, dim, got)
    return expected.numpy(), got.contiguous().cpu().numpy(), c.dtype, f"{op} along {dim}", 1e-5


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", kernels.SCAN_OPS)
def test_scan_matches_cpu_on_views(op, dtype, rng):
    low, high = (0.5, 1.5) if op == "cumprod" and dtype is not minidl.int64 else (-2, 2)
    c, g = both(data(rng, (5, 6, 7), dtype, low, high), dtype)
    for name, view in VIEWS.items():
        for dim in range(3):
            check(*scan_both(op, view(c), view(g), dim))
    check(*scan_both(op, c, g, 1, out_view=lambda t: t.permute(2, 1, 0).contiguous().permute(2, 1, 0)))


@pytest.mark.parametrize("shape, dim", [((3, 700), 1),    # a block per row, several steps
                                        ((37, 40), 1),    # a warp per row, more rows than the grid
                                        ((9, 300), 0)])   # a thread per row (rows adjacent in memory)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scan_paths(shape, dim, dtype, rng):
    c, g = both(data(rng, shape, dtype, -2, 2), dtype)
    check(*scan_both("cumsum", c, g, dim))
    c, g = both(data(rng, shape, dtype, 0.99, 1.01) if dtype is not minidl.int64 else
                rng.choice([-1, 1], shape), dtype)
    check(*scan_both("cumprod", c, g, dim))


def test_scan_of_empty_and_nan():
    for shape in [(0, 3), (3, 0)]:
        c, g = both(np.zeros(shape), minidl.float32)
        assert scan_both("cumsum", c, g, 1)[1].shape == shape
    c, g = both(np.array([1.0, np.nan, 2.0, 3.0]), minidl.float32)
    check(*scan_both("cumsum", c, g, 0))


# ----------------------------------------------------------------------------- argsort
def argsort_both(c, g, dim, descending):
    expected = minidl.empty(c.shape, dtype=minidl.int64)
    got = minidl.empty(c.shape, dtype=minidl.int64, device="cuda")
    call("argsort", "cpu", c, dim, descending, expected._storage.buf)
    call("argsort", "cuda", g, dim, descending, got._storage.buf)
    return expected.numpy(), got.cpu().numpy()


@pytest.mark.parametrize("dtype", DTYPES)
def test_argsort_is_stable_on_views(dtype, rng):
    array = rng.integers(-2, 3, (5, 6, 7)).astype(np.float64)  # many equal keys
    if dtype is not minidl.int64:
        array[rng.random(array.shape) < 0.2] = np.nan
    c, g = both(array, dtype)
    for name, view in VIEWS.items():
        for dim in range(3):
            for descending in (False, True):
                expected, got = argsort_both(view(c), view(g), dim, descending)
                np.testing.assert_array_equal(got, expected, err_msg=f"{name} view along {dim}, desc={descending}")


@pytest.mark.parametrize("tile", [16, 2048])
@pytest.mark.parametrize("dtype", DTYPES)
def test_argsort_long_rows_merge_sorted_tiles(tile, dtype, rng, monkeypatch):
    monkeypatch.setattr(cuda_reduce, "TILE", tile)
    array = rng.integers(0, 6, (3, 301)).astype(np.float64)
    if dtype is not minidl.int64:
        array[:, ::7] = np.nan
        array[0, 5] = -np.inf
    c, g = both(array, dtype)
    for view in (lambda t: t, lambda t: t[:, ::-1], lambda t: t.t()):
        for descending in (False, True):
            expected, got = argsort_both(view(c), view(g), view(c).ndim - 1, descending)
            np.testing.assert_array_equal(got, expected, err_msg=f"desc={descending}")
    if dtype is minidl.float64:
        key = np.where(np.isnan(array[1]), np.inf, array[1])  # NaN last, ties in index order
        np.testing.assert_array_equal(argsort_both(c, g, 1, False)[1][1], np.argsort(key, kind="stable"))


def test_argsort_many_rows_and_sizes(rng):
    for shape in [(1, 1), (40, 1), (40, 2), (3, 5), (300, 40), (2, 3000)]:  # (300, 40): 38 blocks of 8 rows
        c, g = both(rng.integers(0, 4, shape), minidl.int64)
        for descending in (False, True):
            np.testing.assert_array_equal(*argsort_both(c, g, 1, descending)[::-1], err_msg=str(shape))
    c, g = both(np.zeros((0, 3)), minidl.float32)
    assert argsort_both(c, g, 1, False)[1].shape == (0, 3)


# ----------------------------------------------------------------------------- softmax
def softmax_both(name, n, log, *arrays, dtype=minidl.float32):
    cpu = [minidl.tensor(a.reshape(-1), dtype=dtype) for a in arrays]
    gpu = [t.to("cuda") for t in cpu]
    expected, got = minidl.empty_like(cpu[0]), minidl.empty_like(gpu[0])
    kernels.get(name, "cpu")(*(t._storage.buf for t in cpu), expected._storage.buf, n, log)
    kernels.get(name, "cuda")(*(t._storage.buf for t in gpu), got._storage.buf, n, log)
    return expected.numpy(), got.cpu().numpy()


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [minidl.float32, minidl.float64])
@pytest.mark.parametrize("rows, n", [(37, 10), (5, 1), (3, 1500)])  # warps, more rows than the grid; blocks
def test_softmax_and_backward_match_cpu(rows, n, log, dtype, rng):
    x = rng.normal(0, 3, (rows, n))
    x[0, :] *= 1e4               # huge logits stay finite after the shift
    x[-1, :-1] = -np.inf         # a row of one finite logit (a row of -inf only: NaN, on both devices)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype is minidl.float32 else dict(rtol=1e-12, atol=1e-14)
    expected, got = softmax_both("softmax", n, log, x, dtype=dtype)
    assert np.isfinite(got).all() or log
    np.testing.assert_allclose(got, expected, **tol)
    g = rng.normal(0, 1, (rows, n))
    expected, got = softmax_both("softmax_backward", n, log, expected, g, dtype=dtype)
    np.testing.assert_allclose(got, expected, **tol)


def test_softmax_nan_rows_and_errors():
    x = np.array([[1.0, np.nan, 2.0], [1e30, -1e30, 0.0]])
    expected, got = softmax_both("softmax", 3, False, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got[3:], [1, 0, 0])
    g = minidl.zeros(6, device="cuda")._storage.buf
    with pytest.raises(ValueError, match="softmax"):
        kernels.get("softmax", "cuda")(g, g, 4, False)
    kernels.get("softmax", "cuda")(g[:0], g[:0], 3, False)  # no rows: nothing to do
