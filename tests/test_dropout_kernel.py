"""F.dropout as one kernel each way (the ``dropout`` primitive): the same elements as a ``bernoulli_(1 - p)``
drawn from the same generator state, scaled by 1 / (1 - p); the gradient is the saved mask; the kept
fraction is binomial; CPU and 'cuda' (the simulator where there is no GPU) agree bit for bit."""
from __future__ import annotations

import math

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl import kernels

from cuda_support import cuda_device

DTYPES = [minidl.float32, minidl.float64]


def _composed(x, p):
    """Dropout written as bernoulli_ and products (F.dropout before the primitive)."""
    mask = minidl.empty(tuple(x.shape), dtype=x.dtype, device=x.device).bernoulli_(1.0 - p)
    return x * (mask * (1.0 / (1.0 - p)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [0.1, 1 / 3, 0.5, 0.9])
def test_same_elements_and_values_as_bernoulli(dtype, p):
    x = minidl.randn(203, 37, dtype=dtype)
    minidl.manual_seed(7)
    expected = _composed(x, p).numpy()
    minidl.manual_seed(7)
    got = F.dropout(x, p).numpy()
    np.testing.assert_array_equal(got, expected)
    minidl.manual_seed(7)
    assert np.array_equal(F.dropout(x, p).numpy(), got)          # a seed gives the same mask again


@pytest.mark.parametrize("p", [0.2, 0.7])
def test_kept_fraction_is_binomial(p):
    n = 200_000
    kept = float((F.dropout(minidl.ones(n), p) != 0).float().mean())
    assert abs(kept - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)     # five standard deviations


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradient_is_the_scaled_mask_and_one_node(dtype):
    x = minidl.randn(6, 9, dtype=dtype, requires_grad=True)
    y = F.dropout(x, 0.4)
    assert y.grad_fn.name() == "NativeDropoutBackward0"   # torch's node name
    g = minidl.randn(6, 9, dtype=dtype)
    y.backward(g)
    kept = y.detach().numpy() != 0
    scale = np.array(1 / 0.6, dtype=y.detach().numpy().dtype)
    np.testing.assert_array_equal(x.grad.numpy(), np.where(kept, g.numpy() * scale, 0))
    np.testing.assert_array_equal(y.detach().numpy(), np.where(kept, x.detach().numpy() * scale, 0))


def test_strided_input_and_in_place():
    base = minidl.randn(8, 10)
    x = base.t()                                                  # read through strides
    minidl.manual_seed(3)
    expected = _composed(x.contiguous(), 0.5).numpy()
    minidl.manual_seed(3)
    np.testing.assert_array_equal(F.dropout(x, 0.5).numpy(), expected)
    y = minidl.randn(5, 5)
    minidl.manual_seed(4)
    expected = _composed(y, 0.3).numpy()
    minidl.manual_seed(4)
    assert F.dropout(y, 0.3, inplace=True) is y
    np.testing.assert_array_equal(y.numpy(), expected)


def test_module_edges_and_other_dtypes():
    x = minidl.randn(4, 4)
    drop = nn.Dropout(0.5)
    drop.eval()
    assert drop(x) is x
    assert F.dropout(x, 0.0) is x
    assert float(F.dropout(x, 1.0).abs().sum()) == 0.0
    h = minidl.randn(4, 4).to(minidl.bfloat16)                    # the composition still serves half dtypes
    assert F.dropout(h, 0.5).dtype is minidl.bfloat16
    with pytest.raises(TypeError, match="_fused_dropout: float32 or float64 input expected, got int64"):
        minidl.ops._fused_dropout(minidl.arange(4), 0.5)


def test_primitive_checks_its_arguments():
    dropout = kernels.get("dropout", "cpu")
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match=r"dropout: probability must be in \[0, 1\), got 1.0"):
        dropout(x, np.empty_like(x), np.empty_like(x), 1.0, 0, 0)
    with pytest.raises(TypeError, match="dropout: x, out and mask must be float32 or float64 buffers of one dtype"):
        dropout(x, np.empty(4), np.empty_like(x), 0.5, 0, 0)
    with pytest.raises(ValueError, match=r"dropout: x, out and mask differ in size \(4, 3, 4\)"):
        dropout(x, np.empty(3, np.float32), np.empty_like(x), 0.5, 0, 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_gives_the_cpus_bits(dtype):
    cuda_device()
    x = minidl.randn(33, 17, dtype=dtype)
    minidl.manual_seed(11)
    cpu = F.dropout(x, 0.35)
    minidl.manual_seed(11)
    xc = x.to("cuda").requires_grad_()
    on_cuda = F.dropout(xc, 0.35)
    np.testing.assert_array_equal(on_cuda.detach().cpu().numpy(), cpu.numpy())
    on_cuda.sum().backward()
    np.testing.assert_array_equal(xc.grad.cpu().numpy(), (cpu.numpy() != 0) * np.array(1 / 0.65, cpu.numpy().dtype))
