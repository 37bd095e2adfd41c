"""Float to integer conversion follows one rule on every path and device (PyTorch's result on x86):
truncate toward zero into int32 (signed targets of up to 32 bits) or int64 (the others), where NaN
and values outside that range become its minimum, then keep the low bits. The oracle below is
that rule in plain Python integers; PyTorch itself is compared in test_torch_compare.py."""
import math

import numpy as np
import pytest

import minidl

from cuda_support import cuda_device

EDGES = [65519.0, 3e9, -3e9, math.nan, math.inf, -math.inf, -1.0, 3000000001.0, 2.5, -2.5, -0.9, 0.0, -0.0,
         2147483647.0, 2147483648.0, -2147483648.0, -2147483649.0, 1e19, -9.3e18, 9.2e18, 256.7, 32768.0,
         -32769.0, 255.5, -129.0, 9223372036854775807.0, -9223372036854775808.0]
INTEGERS = {"uint8": (8, False), "int16": (16, True), "int32": (32, True), "int64": (64, True)}


def rule(value: float, dst: str):
    """``value`` (already rounded to the source dtype) converted to ``dst`` by minidl's rule."""
    if dst == "bool":
        return value != 0  # NaN is True
    bits, signed = INTEGERS[dst]
    via = 32 if signed and bits <= 32 else 64
    inside = math.isfinite(value) and -(1 << (via - 1)) <= math.trunc(value) < 1 << (via - 1)
    whole = math.trunc(value) if inside else -(1 << (via - 1))
    whole &= (1 << bits) - 1
    return whole - (1 << bits) if signed and whole >= 1 << (bits - 1) else whole


def source(dtype: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.array(EDGES, dtype=np.float64).astype(dtype)


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    if request.param == "cuda":
        cuda_device()
    return request.param


@pytest.mark.parametrize("src", ["float16", "float32", "float64"])
@pytest.mark.parametrize("dst", ["bool", "uint8", "int16", "int32", "int64"])
def test_float_to_integer_follows_the_rule_at_every_length_and_layout(src, dst, device):
    values = source(src)
    expected = np.array([rule(float(v), dst) for v in values], dtype=getattr(np, dst if dst != "bool" else "bool_"))
    for copies in (1, 3, 40):   # 27 to 1080 elements: scalar loops, vectorised bodies and their tails
        data = minidl.from_numpy(np.tile(values, copies)).to(device)
        layouts = {"packed": data, "reversed": data.flip(0),
                   "strided": minidl.from_numpy(np.repeat(np.tile(values, copies), 2)).to(device)[::2]}
        for name, t in layouts.items():
            got = t.to(getattr(minidl, dst)).cpu().numpy()
            want = np.tile(expected, copies)[::-1] if name == "reversed" else np.tile(expected, copies)
            np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {dst}, {copies} copies, {name}")


def test_the_threaded_kernel_follows_the_rule_too():
    from minidl.kernels.cpu import strided
    n = strided.PARALLEL_MIN + 5
    values = np.resize(source("float32"), n)
    got = minidl.from_numpy(values).to(minidl.int16).numpy()
    expected = np.array([rule(float(v), "int16") for v in source("float32")], dtype=np.int16)
    np.testing.assert_array_equal(got, np.resize(expected, n))


def test_numpy_arrays_convert_by_the_rule_and_python_numbers_must_fit():
    np.testing.assert_array_equal(minidl.tensor(np.array([65519.0, -1.0, 3e9]), dtype=minidl.int16).numpy(),
                                  [-17, -1, 0])
    np.testing.assert_array_equal(minidl.tensor(np.array([-1.0, 3000000001.0]), dtype=minidl.uint8).numpy(),
                                  [255, 1])
    assert minidl.tensor([2.7, -2.7], dtype=minidl.int32).tolist() == [2, -2]
    assert minidl.full((2,), 255, dtype=minidl.uint8).tolist() == [255, 255]
    for make in (lambda: minidl.tensor([65519.0], dtype=minidl.int16),
                 lambda: minidl.tensor([70000], dtype=minidl.int16),
                 lambda: minidl.tensor([-1.0], dtype=minidl.uint8),
                 lambda: minidl.tensor([math.nan], dtype=minidl.int32),
                 lambda: minidl.tensor([2.0 ** 63], dtype=minidl.int64),
                 lambda: minidl.full((2,), 3e9, dtype=minidl.int32),
                 lambda: minidl.zeros(2, dtype=minidl.int16).fill_(65519.0)):
        with pytest.raises(RuntimeError, match="cannot be converted to type .* without overflow"):
            make()


def test_ragged_nested_lists_name_the_dim():
    with pytest.raises(ValueError, match=r"tensor: expected sequence of length 2 at dim 1 \(got 1\)"):
        minidl.tensor([[1, 2], [3]])
    with pytest.raises(ValueError, match=r"expected sequence of length 2 at dim 2 \(got 3\)"):
        minidl.tensor([[[1, 2], [3, 4]], [[1, 2], [3, 4, 5]]])
    with pytest.raises(TypeError, match=r"expected a sequence of length 2 at dim 1 \(got 3\)"):
        minidl.tensor([[1, 2], 3])
    with pytest.raises(TypeError, match=r"expected a number at dim 1 \(got a sequence of length 2\)"):
        minidl.tensor([1, [2, 3]])
