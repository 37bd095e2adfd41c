"""The attention kernels' register-blocked product (cpu/jit/tile_product.py, on the vectors of simd.py) against
numpy's matmul: rows that do not fill a micro-tile, transposed operands, accumulation, float32 and float64."""
import numpy as np
import pytest
from numba import njit

from minidl.kernels.cpu.jit.tile_product import padded, product


@njit
def _product(a, pa, ars, acs, rows, b, pb, bs, cols, k, c, pc, cs, accumulate):
    product(a, pa, ars, acs, rows, b, pb, bs, cols, k, c, pc, cs, accumulate)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,k", [(1, 1), (5, 7), (6, 64), (13, 20), (64, 33)])
def test_product_matches_numpy(dtype, rows, k):
    rng = np.random.default_rng(rows * 100 + k)
    cols = padded(21, np.empty(0, dtype))
    a = rng.standard_normal((rows + 2, k)).astype(dtype)          # the product starts at row 1
    b = rng.standard_normal((k, cols + 3)).astype(dtype)          # row stride cols + 3, starting at column 3
    c = rng.standard_normal((rows, cols)).astype(dtype)
    want = a[1:rows + 1] @ b[:, 3:]
    got = np.full_like(c, np.nan)
    _product(a, k, k, 1, rows, b, 3, cols + 3, cols, k, got, 0, cols, False)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
    at = np.ascontiguousarray(a.T)                                # a read transposed: row stride 1
    acc = c.copy()
    _product(at, 1, 1, rows + 2, rows, b, 3, cols + 3, cols, k, acc, 0, cols, True)
    np.testing.assert_allclose(acc, c + want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


def test_padded_is_whole_micro_tile_columns():
    assert [padded(n, np.empty(0, np.float32)) for n in (1, 16, 17, 64)] == [16, 16, 32, 64]
    assert [padded(n, np.empty(0, np.float64)) for n in (1, 8, 9, 64)] == [8, 8, 16, 64]
