"""minidl's own vectorisable float32 exp (cpu/jit/vector_math.py) against float64 numpy."""
import numpy as np

import minidl


def test_float32_exp_is_within_two_ulp_over_the_normal_range():
    x = np.linspace(-87.0, 88.0, 200_003, dtype=np.float32)  # several kernel chunks, parallel too
    got = minidl.from_numpy(x).exp().numpy().astype(np.float64)
    want = np.exp(x.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got - want) / ulp) <= 2.0


def test_float32_exp_special_values_match_numpy():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.7, 89.0, 1e4, -87.3, -100.0, -104.0, -1e4],
                 dtype=np.float32)
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    got = minidl.from_numpy(x).exp().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=2e-45, equal_nan=True)


def _weights(x):
    """exp_weight over an array, compiled as the attention kernels use it."""
    from numba import njit

    from minidl.kernels.cpu.jit.vector_math import exp_weight

    @njit
    def run(x, out):
        for j in range(x.size):
            out[j] = exp_weight(x[j])
    out = np.empty_like(x)
    run(x, out)
    return out


def test_softmax_weight_exp_is_within_two_ulp_and_zero_below_the_normal_range():
    x = np.linspace(-87.0, 0.0, 100_003, dtype=np.float32)
    got, want = _weights(x).astype(np.float64), np.exp(x.astype(np.float64))
    assert np.max(np.abs(got - want) / np.spacing(want.astype(np.float32))) <= 2.0
    special = np.array([-np.inf, -1e4, -104.0, -87.5, np.nan, 0.0, 1e-6], np.float32)
    np.testing.assert_array_equal(_weights(special)[:5], [0, 0, 0, 0, np.nan])
    np.testing.assert_allclose(_weights(special)[5:], np.exp(special[5:].astype(np.float64)), rtol=1e-7)
    np.testing.assert_allclose(_weights(np.array([-3.0, -np.inf])), [np.exp(-3.0), 0], rtol=1e-15)
