"""CUDA elementwise primitives against the CPU's, through the tensor API, on views with offsets,
negative and zero strides (on the simulator where there is no GPU: see cuda_support.py)."""
import numpy as np
import pytest

import minidl
from minidl import formulas, kernels

from cuda_support import cuda_device


@pytest.fixture(scope="module", autouse=True)
def cuda():
    return cuda_device()


def views(t):
    """A few layouts of the same 4x6 data: packed, transposed, flipped, sliced with an offset."""
    return {"packed": t, "transposed": t.t().contiguous().t(), "flipped": t.flip(1),
            "offset": t[:, 1:].contiguous()[:, :5] if t.shape[1] > 5 else t}


def pair(array, dtype=minidl.float32):
    cpu = minidl.tensor(array, dtype=dtype)
    return cpu, cpu.to("cuda")


@pytest.mark.parametrize("op", [op for op in kernels.UNARY_OPS])
@pytest.mark.parametrize("dtype", [minidl.float32, minidl.float64])
def test_unary_matches_cpu(op, dtype, rng):
    cpu, gpu = pair(rng.uniform(-3, 3, (4, 6)), dtype)
    for name, (c, g) in {k: (views(cpu)[k], views(gpu)[k]) for k in views(cpu)}.items():
        expected, got = minidl.empty_like(c), minidl.empty_like(g)
        kernels.get("unary", "cpu")(op, c._storage.buf, c._layout, expected._storage.buf, expected._layout)
        kernels.get("unary", "cuda")(op, g._storage.buf, g._layout, got._storage.buf, got._layout)
        np.testing.assert_allclose(got.cpu().numpy(), expected.numpy(), rtol=2e-6, atol=1e-6, equal_nan=True,
                                   err_msg=f"{op} on a {name} view")


FLOAT_ONLY_BINARY = {f.name for f in formulas.BINARY if f.float_only}  # (integers never reach them)


@pytest.mark.parametrize("op, dtype", [(op, dtype) for op in kernels.BINARY_OPS
                                       for dtype in (minidl.float32, minidl.float64, minidl.int64)
                                       if not (dtype is minidl.int64 and op in FLOAT_ONLY_BINARY)])
def test_binary_matches_cpu_with_broadcasting(op, dtype, rng):
    low = 1 if dtype is minidl.int64 else -3
    a, ga = pair(rng.integers(-5, 6, (4, 6)) if dtype is minidl.int64 else rng.uniform(-3, 3, (4, 6)), dtype)
    b, gb = pair(rng.integers(low, 4, (1, 6)) if dtype is minidl.int64 else rng.uniform(-3, 3, (1, 6)), dtype)
    if op == "pow" and dtype is not minidl.int64:
        a, ga = a.abs(), ga.abs()
    for left, gleft in ((a, ga), (a.flip(0), ga.flip(0)), (a.t().contiguous().t(), ga.t().contiguous().t())):
        shape = left.shape
        bl, gbl = b.expand(shape), gb.expand(shape)
        expected, got = minidl.empty_like(left).contiguous(), minidl.empty_like(gleft).contiguous()
        kernels.get("binary", "cpu")(op, left._storage.buf, left._layout, bl._storage.buf, bl._layout,
                                     expected._storage.buf, expected._layout)
        kernels.get("binary", "cuda")(op, gleft._storage.buf, gleft._layout, gbl._storage.buf, gbl._layout,
                                      got._storage.buf, got._layout)
        np.testing.assert_allclose(got.cpu().numpy(), expected.numpy(), rtol=2e-6, atol=1e-6, equal_nan=True,
                                   err_msg=op)


def test_compare_where_and_float_edge_cases():
    x = minidl.tensor([-2.0, -0.0, 0.0, 1.5, float("nan"), float("inf")])
    y = minidl.tensor([1.0, 0.0, -1.0, 1.5, 2.0, -3.0])
    g, h = x.to("cuda"), y.to("cuda")
    for op in ("eq", "ne", "lt", "le", "gt", "ge"):
        assert (getattr(g, op)(h).cpu().numpy() == getattr(x, op)(y).numpy()).all(), op
    np.testing.assert_array_equal(minidl.where(g > h, g, h).cpu().numpy(), minidl.where(x > y, x, y).numpy())
    for fn in (lambda a, b: a // b, lambda a, b: a % b, lambda a, b: a / b):
        np.testing.assert_array_equal(fn(g, h).cpu().numpy(), fn(x, y).numpy())
    i, j = minidl.tensor([-7, 7, -7, 7, 0]), minidl.tensor([2, -2, -2, 2, 3])
    for fn in (lambda a, b: a // b, lambda a, b: a % b, lambda a, b: a * b - a):
        np.testing.assert_array_equal(fn(i.to("cuda"), j.to("cuda")).cpu().numpy(), fn(i, j).numpy())


@pytest.mark.parametrize("src", ["bool", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"])
def test_copy_converts_every_dtype_pair_like_the_cpu(src):
    values = np.array([0, 1, -1, 2.5, -3.75, 100, 65519, 1e-7, 6e-8, 3e-8], dtype=np.float64)
    data = values.astype(src) if src != "bool" else values != 0
    cpu = minidl.from_numpy(data)
    gpu = cpu.to("cuda")
    for dst in ("bool", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"):
        dtype = getattr(minidl, dst)
        got = gpu.to(dtype).cpu().numpy()
        expected = cpu.to(dtype).numpy()
        np.testing.assert_array_equal(got, expected, err_msg=f"{src} -> {dst}")


def test_float16_rounding_matches_numpy_bit_for_bit():
    bits = np.arange(0, 1 << 16, dtype=np.uint16).view(np.float16)
    as_float = bits.astype(np.float32)
    back = minidl.from_numpy(as_float).to("cuda").half().float().cpu().numpy()
    np.testing.assert_array_equal(back, as_float)  # every half survives the round trip (NaNs: equal_nan)
    finite = as_float[np.isfinite(as_float)]
    probes = np.concatenate([finite[:-1] + np.diff(finite) / 2, finite * np.float32(1.0001),  # midpoints: ties
                             np.float32([65504, 65519.99, 65520, 7e4, -7e4, 2.0 ** -25, 2.0 ** -24 * 1.5])])
    got = minidl.from_numpy(probes).to("cuda").half().cpu().numpy()
    with np.errstate(over="ignore"):  # (beyond 65504 numpy rounds to inf, as it should)
        expected = probes.astype(np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))


def test_packed_kernels_over_several_steps_per_thread(rng):
    """Runs long enough for the packed kernels' 4-way loop (and its remainder), from offsets, with a
    broadcast scalar operand and a fill."""
    n = 4 * 2 * 256 * 3 + 7  # several 4-element steps per thread of the simulator's grid, plus a tail
    base = rng.standard_normal(n + 3)
    cpu = minidl.tensor(base, dtype=minidl.float32)[3:]  # offset 3
    gpu = minidl.tensor(base, dtype=minidl.float32).to("cuda")[3:]
    np.testing.assert_allclose(gpu.exp().cpu().numpy(), cpu.exp().numpy(), rtol=2e-6)
    np.testing.assert_array_equal((gpu * 2.5 - gpu).cpu().numpy(), (cpu * 2.5 - cpu).numpy())
    np.testing.assert_array_equal(gpu.double().cpu().numpy(), cpu.double().numpy())
    np.testing.assert_array_equal(minidl.full((n,), 1.5, device="cuda").cpu().numpy(), np.full(n, 1.5, np.float32))
