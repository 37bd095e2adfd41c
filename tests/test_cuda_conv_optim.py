"""CUDA im2col/col2im/max-pool and fused optimizer steps against the CPU kernels (on the
simulator where there is no GPU: see cuda_support.py)."""
import itertools

import numpy as np
import pytest

from minidl import kernels

from cuda_support import both, cuda_device, host


@pytest.fixture(scope="module", autouse=True)
def cuda():
    return cuda_device()


def geometry(n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw):
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    return (n * c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


# (N, C, h, w, kh, kw, sh, sw, ph, pw, dh, dw)
GEOMETRIES = {
    "plain": (2, 3, 5, 6, 3, 3, 1, 1, 0, 0, 1, 1),
    "stride-padding": (2, 2, 7, 6, 3, 2, 2, 3, 1, 1, 1, 1),
    "dilation": (1, 3, 8, 7, 2, 3, 1, 2, 2, 0, 3, 2),
    "1x1": (3, 2, 4, 4, 1, 1, 2, 2, 0, 0, 1, 1),
    "window-beyond-image": (1, 2, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1),  # window (0, 0) lies in the padding
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", GEOMETRIES)
@pytest.mark.parametrize("by_channel", [False, True], ids=["unfold-layout", "gemm-layout"])
def test_im2col_col2im_match_cpu(rng, dtype, name, by_channel):
    n, c, *rest = GEOMETRIES[name]
    g = geometry(n, c, *rest)
    planes, h, w, kh, kw, *_, oh, ow = g
    channels = c if by_channel else 0
    cpu_x, gpu_x = both(rng.standard_normal(planes * h * w).astype(dtype))
    cpu_cols, gpu_cols = both(np.full(planes * kh * kw * oh * ow, 9, dtype))
    kernels.get("im2col", "cpu")(cpu_x, cpu_cols, g, channels)
    kernels.get("im2col", "cuda")(gpu_x, gpu_cols, g, channels)
    np.testing.assert_array_equal(host(gpu_cols), cpu_cols)
    cpu_cols, gpu_cols = both(rng.standard_normal(cpu_cols.size).astype(dtype))
    cpu_img, gpu_img = both(np.full(planes * h * w, 9, dtype))
    kernels.get("col2im", "cpu")(cpu_cols, cpu_img, g, channels)
    kernels.get("col2im", "cuda")(gpu_cols, gpu_img, g, channels)
    np.testing.assert_allclose(host(gpu_img), cpu_img, rtol=1e-6 if dtype is np.float32 else 1e-13, atol=1e-6)


def test_conv_primitives_check_geometry_like_the_cpu():
    g = geometry(1, 2, 4, 4, 2, 2, 1, 1, 0, 0, 1, 1)
    _, x = both(np.zeros(32, np.float32))
    _, cols = both(np.zeros(2 * 4 * 9, np.float32))
    with pytest.raises(ValueError, match="im2col: channels=3"):
        kernels.get("im2col", "cuda")(x, cols, g, 3)
    with pytest.raises(ValueError, match="col2im: column buffer"):
        kernels.get("col2im", "cuda")(cols[:10], x, g)
    with pytest.raises(ValueError, match="max_pool2d: invalid geometry"):
        kernels.get("max_pool2d", "cuda")(x, cols, cols, g[:5] + (0,) + g[6:])
    with pytest.raises(TypeError, match="im2col"):
        kernels.get("im2col", "cuda")(x.astype(np.int64), cols.astype(np.int64), g)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", GEOMETRIES)
def test_max_pool2d_and_backward_match_cpu(rng, dtype, name):
    g = geometry(*GEOMETRIES[name])
    planes, h, w, *_, oh, ow = g
    x = rng.standard_normal(planes * h * w).astype(dtype)
    x[1::2] = x[::2][:x[1::2].size]  # ties: the first maximum wins
    x[5] = np.nan                   # NaN propagates
    cpu_x, gpu_x = both(x)
    L = planes * oh * ow
    cpu_out, gpu_out = both(np.zeros(L, dtype))
    cpu_idx, gpu_idx = both(np.zeros(L, np.int64))
    kernels.get("max_pool2d", "cpu")(cpu_x, cpu_out, cpu_idx, g)
    kernels.get("max_pool2d", "cuda")(gpu_x, gpu_out, gpu_idx, g)
    np.testing.assert_array_equal(host(gpu_out), cpu_out)
    np.testing.assert_array_equal(host(gpu_idx), cpu_idx)
    grad = np.round(rng.standard_normal(L) * 8).astype(dtype) / 8  # exact sums whatever the atomics' order
    index = cpu_idx.copy()
    index[::5] = h * w + 3          # indices outside the plane are skipped
    cpu_g, gpu_g = both(grad)
    cpu_i, gpu_i = both(index)
    cpu_in, gpu_in = both(np.full(planes * h * w, 9, dtype))
    kernels.get("max_pool2d_backward", "cpu")(cpu_g, cpu_i, cpu_in, g)
    kernels.get("max_pool2d_backward", "cuda")(gpu_g, gpu_i, gpu_in, g)
    np.testing.assert_array_equal(host(gpu_in), cpu_in)


def test_conv_on_several_blocks_and_elements_per_thread(rng):
    g = geometry(2, 4, 12, 11, 3, 3, 1, 2, 1, 1, 1, 1)  # thousands of column elements
    planes, h, w, kh, kw, *_, oh, ow = g
    cpu_x, gpu_x = both(rng.standard_normal(planes * h * w))
    cpu_cols, gpu_cols = both(np.zeros(planes * kh * kw * oh * ow))
    kernels.get("im2col", "cpu")(cpu_x, cpu_cols, g, 4)
    kernels.get("im2col", "cuda")(gpu_x, gpu_cols, g, 4)
    np.testing.assert_array_equal(host(gpu_cols), cpu_cols)
    kernels.get("col2im", "cpu")(cpu_cols, cpu_x, g, 4)
    kernels.get("col2im", "cuda")(gpu_cols, gpu_x, g, 4)
    np.testing.assert_allclose(host(gpu_x), cpu_x, rtol=1e-13, atol=1e-13)


# ----------------------------------------------------------------------------- optimizer steps
N = 1100  # several blocks, several elements per thread


def run_both(rng, name, dtype, count, *scalars):
    bufs = [rng.standard_normal(N).astype(dtype) for _ in range(count)]
    if name == "adam_step":
        bufs[3], bufs[4] = np.abs(bufs[3]), np.abs(bufs[4])  # second moments are not negative
    cpu = [b.copy() for b in bufs]
    gpu = [both(b)[1] for b in bufs]
    kernels.get(name, "cpu")(*cpu, *scalars)
    kernels.get(name, "cuda")(*gpu, *scalars)
    tol = 2e-6 if dtype is np.float32 else 1e-14
    for c, gb, label in zip(cpu, gpu, ("param", "grad", "state 1", "state 2", "state 3")):
        np.testing.assert_allclose(host(gb), c, rtol=tol, atol=tol, err_msg=f"{name} {label} {scalars}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("momentum,nesterov,first,maximize,wd",
                         [flags for flags in itertools.product([0.0, 0.9], [False, True], [False, True],
                                                                [False, True], [0.0, 0.01])
                          if flags[0] or not (flags[1] or flags[2])])
def test_sgd_step_matches_cpu(rng, dtype, momentum, nesterov, first, maximize, wd):
    run_both(rng, "sgd_step", dtype, 3, 0.1, wd, momentum, 0.25, nesterov, maximize, first)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("amsgrad,maximize,wd,decay",
                         list(itertools.product([False, True], [False, True], [0.0, 0.01], [1.0, 0.999])))
def test_adam_step_matches_cpu(rng, dtype, amsgrad, maximize, wd, decay):
    run_both(rng, "adam_step", dtype, 5, 0.9, 0.999, 1e-8, wd, decay, amsgrad, maximize, 0.01, 0.3)


# ----------------------------------------------------------------------------- conv2d through the op
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("size", [(7, 7), (20, 21)], ids=str)
def test_pointwise_conv2d_matches_the_cpu(rng, stride, size):
    """A 1x1 conv2d on 'cuda' (ops/conv.py: through the columns below 100 positions, one product per image from 100
    up), forward and every gradient, against the same op on the CPU."""
    import minidl
    import minidl.nn.functional as F
    x, w, b, u = (rng.standard_normal(s) for s in ((2, 3, *size), (5, 3, 1, 1), (5,), (1,)))
    results = []
    for device in ("cpu", "cuda"):
        xs, ws, bs = (minidl.tensor(a, device=device, requires_grad=True) for a in (x, w, b))
        y = F.conv2d(xs, ws, bs, stride=stride)
        (y * minidl.tensor(np.cos(np.arange(y.numel())).reshape(tuple(y.shape)) + u, device=device)).sum().backward()
        results.append([t.detach().cpu().numpy() for t in (y, xs.grad, ws.grad, bs.grad)])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(theirs, ours, rtol=1e-12, atol=1e-12)
