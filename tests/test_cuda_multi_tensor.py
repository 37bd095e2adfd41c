"""The CUDA multi-tensor optimizer steps, norms and scaling against the CPU kernels (on the simulator
where there is no GPU: see cuda_support.py)."""
import itertools

import numpy as np
import pytest

from minidl import kernels

from cuda_support import both, cuda_device, host

SIZES = [1100, 3, 0, 517]  # several blocks, a tiny tensor and an empty one


@pytest.fixture(scope="module", autouse=True)
def cuda():
    return cuda_device()


def lists(rng, dtype, count):
    """count operand lists of SIZES-shaped buffers on both devices (second moments not negative)."""
    cpu, gpu = [], []
    for k in range(count):
        host_bufs = [rng.standard_normal(n).astype(dtype) for n in SIZES]
        if k >= 3:
            host_bufs = [np.abs(b) for b in host_bufs]
        pairs = [both(b) for b in host_bufs]
        cpu.append([c for c, _ in pairs])
        gpu.append([g for _, g in pairs])
    return cpu, gpu


def check(cpu, gpu, dtype, label):
    tol = 2e-6 if dtype is np.float32 else 1e-14
    for k, (cl, gl) in enumerate(zip(cpu, gpu)):
        for j, (c, g) in enumerate(zip(cl, gl)):
            np.testing.assert_allclose(host(g), c, rtol=tol, atol=tol, err_msg=f"{label}: operand {k}, tensor {j}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("momentum,nesterov,maximize,wd",
                         [f for f in itertools.product([0.0, 0.9], [False, True], [False, True], [0.0, 0.01])
                          if f[0] or not f[1]])
def test_sgd_steps_match_cpu(rng, dtype, momentum, nesterov, maximize, wd):
    cpu, gpu = lists(rng, dtype, 3)
    firsts = [True, False, False, True]
    args = (0.1, wd, momentum, 0.25, nesterov, maximize, firsts)
    kernels.get("sgd_steps", "cpu")(*cpu, *args)
    kernels.get("sgd_steps", "cuda")(*gpu, *args)
    check(cpu, gpu, dtype, "sgd_steps")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("amsgrad,maximize,wd,decay",
                         list(itertools.product([False, True], [False, True], [0.0, 0.01], [1.0, 0.999])))
def test_adam_steps_match_cpu(rng, dtype, amsgrad, maximize, wd, decay):
    cpu, gpu = lists(rng, dtype, 5)
    args = (0.9, 0.999, 1e-8, wd, decay, amsgrad, maximize, [0.01, 0.02, 0.03, 0.04], [0.3, 0.4, 0.5, 0.6])
    kernels.get("adam_steps", "cpu")(*cpu, *args)
    kernels.get("adam_steps", "cuda")(*gpu, *args)
    check(cpu, gpu, dtype, "adam_steps")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("maximize,wd", list(itertools.product([False, True], [0.0, 0.01])))
def test_adagrad_steps_match_cpu(rng, dtype, maximize, wd):
    cpu, gpu = lists(rng, dtype, 3)
    cpu[2] = [np.abs(b) for b in cpu[2]]
    gpu[2] = [both(b)[1] for b in cpu[2]]
    args = (wd, 1e-10, maximize, [0.1, 0.05, 0.2, 0.01])
    kernels.get("adagrad_steps", "cpu")(*cpu, *args)
    kernels.get("adagrad_steps", "cuda")(*gpu, *args)
    check(cpu, gpu, dtype, "adagrad_steps")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ord", [1.0, 2.0, 3.5, np.inf])
def test_norms_and_scale_match_cpu(rng, dtype, ord):
    (cpu,), (gpu,) = lists(rng, dtype, 1)
    cpu[0][7] = np.nan if ord == np.inf else cpu[0][7]   # a NaN wins the max
    gpu[0] = both(cpu[0])[1]
    cpu_out, gpu_out = both(np.full(len(SIZES), 7.0))
    kernels.get("norms", "cpu")(cpu, ord, cpu_out)
    kernels.get("norms", "cuda")(gpu, ord, gpu_out)
    np.testing.assert_allclose(host(gpu_out), cpu_out, rtol=1e-12)   # (sums in another order)
    kernels.get("scale", "cpu")(cpu, 0.375)
    kernels.get("scale", "cuda")(gpu, 0.375)
    check([cpu], [gpu], dtype, "scale")


def test_multi_tensor_kernels_refuse_mismatched_buffers():
    _, p = both(np.zeros(4))
    _, g = both(np.zeros(5))
    with pytest.raises(ValueError, match="sgd_steps: every buffer of tensor 0 must hold 4 float64"):
        kernels.get("sgd_steps", "cuda")([p], [g], None, 0.1, 0, 0, 0, False, False, [False])
    with pytest.raises(TypeError, match="adam_steps: no CUDA kernel for dtype int64"):
        i = both(np.zeros(4, np.int64))[1]
        kernels.get("adam_steps", "cuda")([i], [i], [i], [i], None, 0.9, 0.99, 1e-8, 0, 1, False, False, [1], [1])


def test_lists_longer_than_one_launch_holds(rng):
    """More tensors than a TensorList holds (MULTI_MAX) take several launches; every tensor is updated."""
    sizes = range(1, 131)
    cpu = [[rng.standard_normal(n) for n in sizes] for _ in range(4)]
    cpu[3] = [np.abs(b) for b in cpu[3]]
    gpu = [[both(b)[1] for b in op] for op in cpu]
    args = (0.9, 0.999, 1e-8, 0.0, 1.0, False, False, [0.01 * (j % 7 + 1) for j in sizes], [0.5] * len(sizes))
    kernels.get("adam_steps", "cpu")(*cpu, None, *args)
    kernels.get("adam_steps", "cuda")(*gpu, None, *args)
    check(cpu, gpu, np.float64, "adam_steps")
    cpu_out, gpu_out = both(np.zeros(len(sizes)))
    kernels.get("norms", "cpu")(cpu[0], 2.0, cpu_out)
    kernels.get("norms", "cuda")(gpu[0], 2.0, gpu_out)
    np.testing.assert_allclose(host(gpu_out), cpu_out, rtol=1e-12)
