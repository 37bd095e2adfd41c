"""CUDA take/put/nonzero/matmul against the CPU's (on the simulator where there is no GPU: see
cuda_support.py), and out-of-range indices: IndexError at once on the CPU, at the next
synchronisation on 'cuda'."""
import numpy as np
import pytest

import minidl
from minidl import kernels
from minidl.layout import Layout

from cuda_support import both, cuda_device, host

DTYPES = [np.float32, np.float64, np.int64, np.bool_]


@pytest.fixture(scope="module", autouse=True)
def cuda():
    return cuda_device()


def data(rng, dtype, n):
    if dtype is np.bool_:
        return rng.random(n) < 0.4
    return (rng.integers(-9, 10, n) if dtype is np.int64 else rng.standard_normal(n)).astype(dtype)


# source layouts over a buffer of 60 elements: packed, strided, flipped, offset, broadcast
LAYOUTS = {
    "packed": Layout((5, 12)),
    "transposed": Layout((12, 5), (1, 12)),
    "flipped": Layout((4, 12), (-12, -1), 59),
    "offset-strided": Layout((3, 4), (16, 3), 7),
    "broadcast": Layout((6, 10), (0, 1), 20),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", LAYOUTS)
def test_take_matches_cpu_on_strided_sources(rng, dtype, name):
    layout = LAYOUTS[name]
    cpu_src, gpu_src = both(data(rng, dtype, 60))
    index = rng.integers(0, layout.numel, 700)  # several blocks, several elements per thread
    cpu_idx, gpu_idx = both(index)
    expected, got = both(np.zeros(index.size, dtype))
    kernels.get("take", "cpu")(cpu_src, layout, cpu_idx, expected)
    kernels.get("take", "cuda")(gpu_src, layout, gpu_idx, got)
    np.testing.assert_array_equal(host(got), expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_put_matches_cpu_with_duplicates(rng, dtype, accumulate):
    layout = LAYOUTS["flipped"]
    # duplicates only when accumulating: plain writes to one place race on a GPU, as in PyTorch
    index = rng.integers(0, layout.numel, 600) if accumulate else rng.permutation(layout.numel)[:40]
    dst, values = data(rng, dtype, 60), data(rng, dtype, index.size)
    if dtype is np.float32 or dtype is np.float64:  # eighths add exactly: the atomics' order cannot matter
        dst, values = np.round(dst * 8) / 8, np.round(values * 8) / 8
    cpu_dst, gpu_dst = both(dst)
    cpu_idx, gpu_idx = both(index)
    cpu_val, gpu_val = both(values)
    kernels.get("put", "cpu")(cpu_dst, layout, cpu_idx, cpu_val, accumulate)
    kernels.get("put", "cuda")(gpu_dst, layout, gpu_idx, gpu_val, accumulate)
    np.testing.assert_array_equal(host(gpu_dst), cpu_dst)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["packed", "flipped", "offset-strided", "broadcast"])
def test_nonzero_matches_cpu_on_views(rng, dtype, name):
    layout = LAYOUTS[name]
    values = data(rng, dtype, 60)
    values[rng.random(60) < 0.5] = 0
    cpu_x, gpu_x = both(values)
    np.testing.assert_array_equal(host(kernels.get("nonzero", "cuda")(gpu_x, layout)),
                                  kernels.get("nonzero", "cpu")(cpu_x, layout))


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 1500])
def test_nonzero_sizes_across_tiles_and_blocks(rng, n):
    values = (rng.random(n) < 0.3).astype(np.float32)
    _, gpu_x = both(values)
    got = host(kernels.get("nonzero", "cuda")(gpu_x, Layout((n,))))
    np.testing.assert_array_equal(got, np.flatnonzero(values))
    assert got.dtype == np.int64
    zeros = both(np.zeros(n, np.float32))[1]
    assert host(kernels.get("nonzero", "cuda")(zeros, Layout((n,)))).size == 0


def test_nonzero_offsets_scan_walks_several_chunks(rng):
    """The one-block scan of per-tile counts, with more tiles than threads (large inputs)."""
    from minidl.kernels.cuda import runtime
    counts = rng.integers(0, 257, 2500)
    _, gpu_counts = both(counts)
    _, offsets = both(np.zeros(counts.size + 1, np.int64))
    runtime.launch_rows(runtime.module("indexing")("exclusive_scan_i64"), 1, gpu_counts, runtime.i64(counts.size),
                        offsets, block=1024)
    np.testing.assert_array_equal(host(offsets), np.concatenate([[0], np.cumsum(counts)]))


def test_tensor_indexing_on_cuda_matches_cpu(rng):
    x = minidl.tensor(rng.standard_normal((5, 7)))
    g = x.to("cuda")
    index = minidl.tensor([[4, -1], [0, 2]])
    for fn in (lambda t, i: t[i], lambda t, i: t[:, i], lambda t, i: t[i, i.flip(0)], lambda t, i: t.flip(1)[i],
               lambda t, i: t.gather(1, i % 5), lambda t, i: t.index_select(0, i[0] % 5),
               lambda t, i: t.scatter_add(0, i % 5, t[:2, :2]), lambda t, i: t.index_add(1, i[1] % 7, t[:, :2]),
               lambda t, i: t[t > 0.5], lambda t, i: t.nonzero(), lambda t, i: t.take(i)):
        np.testing.assert_allclose(fn(g, index.to("cuda")).cpu().numpy(), fn(x, index).numpy(), rtol=1e-12)


def test_cpu_index_tensors_index_a_cuda_tensor_as_in_torch(rng):
    """x[i] and x[i] = v take a CPU index (or mask) for a tensor on any device; index_select does not."""
    x = minidl.tensor(rng.standard_normal((5, 7)))
    index, mask = minidl.tensor([4, -1, 0]), minidl.tensor([True, False, True, False, True])
    for fn in (lambda t: t[index], lambda t: t[:, index], lambda t: t[mask], lambda t: t[mask, 2:]):
        got = fn(x.to("cuda"))
        assert got.device.type == "cuda"
        np.testing.assert_array_equal(got.cpu().numpy(), fn(x).numpy())
    g, c = x.to("cuda"), x.clone()
    g[index] = 1.5
    c[index] = 1.5
    g[mask, 0] = -2.0
    c[mask, 0] = -2.0
    np.testing.assert_array_equal(g.cpu().numpy(), c.numpy())
    with pytest.raises(RuntimeError, match="index_select: expected all tensors to be on the same device"):
        x.to("cuda").index_select(0, index)


OUT_OF_RANGE = {
    "getitem": lambda x, i: x[i],
    "getitem-negative": lambda x, i: x[-i],
    "getitem-second-dim": lambda x, i: x[:, i],
    "gather": lambda x, i: x.gather(1, i.reshape(1, 1)),
    "gather-negative": lambda x, i: x.gather(0, -i.reshape(1, 1)),
    "index_select": lambda x, i: x.index_select(0, i),
    "scatter": lambda x, i: x.scatter(1, i.reshape(1, 1), 1.0),
    "scatter_add-inplace": lambda x, i: x.scatter_add_(0, i.reshape(1, 1), minidl.ones(1, 1, device=x.device)),
    "take": lambda x, i: x.take(i * 4),
    "setitem": lambda x, i: x.__setitem__(i, 1.0),
}


@pytest.mark.parametrize("name", OUT_OF_RANGE)
def test_out_of_range_raises_at_once_on_cpu_and_at_the_next_sync_on_cuda(name):
    fn = OUT_OF_RANGE[name]
    x = minidl.arange(20.0).reshape(4, 5)
    bad = minidl.tensor([7])
    with pytest.raises(IndexError, match=r"index -?\d+ is out of bounds"):
        fn(x, bad)
    g = x.to("cuda")
    result = fn(g, bad.to("cuda"))  # launching does not wait for the device, so nothing is raised yet
    with pytest.raises(IndexError, match=r"index -?\d+ is out of bounds .* CUDA kernel"):
        (result if result is not None else g).cpu()
    np.testing.assert_array_equal(g.cpu().numpy(), x.numpy())  # reported once; nothing bad was written


def test_out_of_range_surfaces_at_item():
    g = minidl.arange(6.0).to("cuda")
    picked = g.take(minidl.tensor([1, 6]).to("cuda")) * 2
    with pytest.raises(IndexError, match="index 6 is out of bounds .* size 6"):
        picked[0].item()


# ----------------------------------------------------------------------------- matmul
def matmul_case(rng, dtype, a_layout, b_layout, out_layout):
    cpu_a, gpu_a = both(rng.standard_normal(200).astype(dtype))
    cpu_b, gpu_b = both(rng.standard_normal(200).astype(dtype))
    cpu_out, gpu_out = both(np.full(200, 7, dtype))
    kernels.get("matmul", "cpu")(cpu_a, a_layout, cpu_b, b_layout, cpu_out, out_layout)
    kernels.get("matmul", "cuda")(gpu_a, a_layout, gpu_b, b_layout, gpu_out, out_layout)
    tol = 1e-5 if dtype is np.float32 else 1e-12
    np.testing.assert_allclose(host(gpu_out), cpu_out, rtol=tol, atol=tol)  # untouched elements stay 7


MATMULS = {
    "packed": (Layout((3, 4)), Layout((4, 5)), Layout((3, 5))),
    "transposed": (Layout((3, 4), (1, 3)), Layout((4, 5), (1, 4)), Layout((3, 5))),
    "batched-broadcast": (Layout((2, 3, 4)), Layout((2, 4, 5), (0, 5, 1), 10), Layout((2, 3, 5), (20, 5, 1), 3)),
    "negative-strides": (Layout((3, 4), (-4, -1), 40), Layout((4, 5), (5, -1), 4), Layout((3, 5), (-5, 1), 100)),
    "gapped-rows": (Layout((3, 4), (9, 2), 1), Layout((4, 5), (11, 1)), Layout((3, 5), (1, 3), 50)),
    "out-transposed-batched": (Layout((2, 3, 4), (1, 24, 6)), Layout((2, 4, 5)), Layout((2, 3, 5), (1, 2, 6))),
    "empty-k": (Layout((3, 0)), Layout((0, 5)), Layout((3, 5))),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", MATMULS)
def test_matmul_matches_cpu(rng, dtype, name):
    matmul_case(rng, dtype, *MATMULS[name])


def test_matmul_rejects_layouts_outside_the_buffer():
    _, gpu = both(np.zeros(6, np.float32))
    with pytest.raises(ValueError, match="matmul"):
        kernels.get("matmul", "cuda")(gpu, Layout((2, 3)), gpu, Layout((3, 2), (1, 3), 1), gpu, Layout((2, 2)))


@pytest.mark.parametrize("wrap", [False, True])
def test_check_index_terms_match_the_cpu_and_numpy(wrap):
    index = np.array([0, 3, -1, -4, 2, 1] * 50, np.int64)
    if not wrap:
        index = np.abs(index) % 4
    expected = np.where(index < 0, index + 4, index) * 7
    for device in ("cpu", "cuda"):
        buf = kernels.get("from_host", device)(index)
        out = kernels.get("alloc", device)(index.size, minidl.int64)
        kernels.get("check_index", device)(buf, 4, 7, wrap, out)
        np.testing.assert_array_equal(kernels.get("to_host", device)(out), expected, err_msg=device)


def test_check_index_reports_the_index_as_given():
    index = np.array([1, -5, 9], np.int64)
    out = np.empty(3, np.int64)
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension with size 4"):
        kernels.get("check_index", "cpu")(index, 4, 1, True, out)
    g = kernels.get("alloc", "cuda")(3, minidl.int64)
    kernels.get("check_index", "cuda")(kernels.get("from_host", "cuda")(index), 4, 1, True, g)
    with pytest.raises(IndexError, match="index (-5|9) is out of bounds"):  # whichever thread came first
        kernels.get("to_host", "cuda")(g)
    assert list(kernels.get("to_host", "cuda")(g)) == [1, 1 << 62, 1 << 62]  # bad terms lie beyond any tensor
