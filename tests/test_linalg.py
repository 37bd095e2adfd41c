"""minidl.linalg's decompositions beyond what the op corpus and the registry sweeps check: the errors and
info codes of failed factorisations (singular, not positive-definite) as torch's, argument checks that name
the op, the tuples' fields (lstsq, svd without U and V), pivots, and the ``linalg`` primitive's contract on
both devices. torch is the oracle (imported by the tests only); reconstructions check against the input."""
from __future__ import annotations

import numpy as np
import pytest

import minidl
from minidl import kernels
from minidl.kernels import lapack
from minidl.linalg import LinAlgError
from minidl.onnx import OnnxExporterError

from cuda_support import cuda_device

torch = pytest.importorskip("torch")
rng = np.random.default_rng(45)


def both(values):
    return minidl.tensor(values), torch.tensor(values)


def singular_batch():
    """Three 3x3 matrices; the second has a zero column, so LU meets an exactly zero pivot at column 2."""
    a = rng.standard_normal((3, 3, 3)) + 3 * np.eye(3)
    a[1, :, 1] = 0.0
    return a


# ----------------------------------------------------------------------------- errors and info codes
def test_inv_of_a_singular_matrix_names_the_batch_element_and_pivot():
    a = singular_batch()
    with pytest.raises(torch.linalg.LinAlgError) as want:
        torch.linalg.inv(torch.tensor(a))
    with pytest.raises(LinAlgError) as got:
        minidl.linalg.inv(minidl.tensor(a))
    assert str(got.value) == str(want.value)
    assert isinstance(got.value, RuntimeError)


def test_inv_ex_reports_info_per_matrix_as_torch():
    m, t = both(singular_batch())
    np.testing.assert_array_equal(minidl.linalg.inv_ex(m).info.numpy(), torch.linalg.inv_ex(t).info.numpy())
    assert minidl.linalg.inv_ex(m).info.dtype is minidl.int32


def test_cholesky_names_the_leading_minor_that_is_not_positive_definite():
    a = np.stack([np.eye(4), np.diag([1.0, 2.0, -1.0, 3.0])])
    m, t = both(a)
    with pytest.raises(torch.linalg.LinAlgError) as want:
        torch.linalg.cholesky(t)
    with pytest.raises(LinAlgError) as got:
        minidl.linalg.cholesky(m)
    assert str(got.value) == str(want.value)
    np.testing.assert_array_equal(minidl.linalg.cholesky_ex(m).info.numpy(), torch.linalg.cholesky_ex(t).info.numpy())


@pytest.mark.parametrize("call, error", [
    (lambda lib, a: lib.linalg.solve(a, a[..., :1]), "LinAlgError"),
    (lambda lib, a: lib.linalg.solve_ex(a[0], a[0, :, 0], check_errors=True), "LinAlgError"),
    (lambda lib, a: lib.linalg.lu_factor(a), "RuntimeError"),
    (lambda lib, a: lib.linalg.lu_factor_ex(a, check_errors=True), "RuntimeError")])
def test_solvers_on_singular_matrices_raise_as_torch(call, error):
    m, t = both(singular_batch()[1:])
    with pytest.raises(RuntimeError) as want:
        call(torch, t)
    with pytest.raises(RuntimeError) as got:
        call(minidl, m)
    assert str(got.value) == str(want.value)
    assert isinstance(got.value, LinAlgError) == (error == "LinAlgError") == isinstance(want.value,
                                                                                        torch.linalg.LinAlgError)


def test_cond_of_a_singular_matrix_is_infinite_as_torch():
    m, t = both(singular_batch())
    for p in ("fro", 1, -float("inf")):
        np.testing.assert_allclose(minidl.linalg.cond(m, p).numpy(), torch.linalg.cond(t, p).numpy(), rtol=1e-10)


def test_lu_factor_ex_info_and_pivots_match_torch():
    """Past kernels/lapack.py's BLOCK columns too (the corpus's matrices fit in one block), with a zero pivot
    in the second block."""
    n = lapack.BLOCK + 20
    late_zero = np.stack([np.eye(n), np.eye(n)])
    late_zero[1, :, n - 10] = 0.0
    for a in (singular_batch(), rng.standard_normal((2, 4, 3)), rng.standard_normal((3, 5)),
              rng.standard_normal((2, n + 7, n)), late_zero):
        m, t = both(a)
        got, want = minidl.linalg.lu_factor_ex(m), torch.linalg.lu_factor_ex(t)
        assert got.pivots.dtype is minidl.int32
        np.testing.assert_array_equal(got.pivots.numpy(), want.pivots.numpy())
        np.testing.assert_array_equal(got.info.numpy(), want.info.numpy())
        np.testing.assert_allclose(got.LU.numpy(), want.LU.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call, match", [
    (lambda: minidl.linalg.inv(minidl.ones(2, 2, dtype=minidl.int64)), r"linalg\.inv: .*float.*int64"),
    (lambda: minidl.linalg.det(minidl.ones(2, 3)), r"linalg\.det: A must be batches of square matrices, but they "
                                                   r"are 2 by 3"),
    (lambda: minidl.linalg.cholesky(minidl.ones(3)), r"linalg\.cholesky: .*at least 2 dimensions.*\[3\]"),
    (lambda: minidl.linalg.solve(minidl.eye(3), minidl.ones(2, 1)),
     r"linalg\.solve: Incompatible shapes .*3x3 and 2x1"),
    (lambda: minidl.linalg.solve(minidl.eye(2), minidl.ones(2, dtype=minidl.float64)), r"same dtype.*float32.*float64"),
    (lambda: minidl.linalg.qr(minidl.eye(2), mode="full"), r"unrecognized mode 'full'"),
    (lambda: minidl.linalg.eigh(minidl.eye(2), UPLO="X"), r"linalg\.eigh: .*UPLO.*X"),
    (lambda: minidl.linalg.tensorinv(minidl.ones(2, 3), ind=1), r"linalg\.tensorinv: .*3 != 2"),
    (lambda: minidl.ormqr(minidl.ones(2, 3), minidl.ones(3), minidl.ones(2, 4)),
     r"torch\.ormqr: tau\.shape\[-1\] must be equal to min"),
    (lambda: minidl.ormqr(minidl.ones(3, 2), minidl.ones(2), minidl.ones(2, 4), left=False),
     r"torch\.ormqr: other\.shape\[-1\] must be equal to input\.shape\[-2\]"),
])
def test_bad_arguments_name_the_op_and_what_is_wrong(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()


# ----------------------------------------------------------------------------- results as torch fills them
@pytest.mark.parametrize("driver", [None, "gelsd", "gels"])
def test_lstsq_fields_as_torch_fills_them_per_driver(driver):
    a, b = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 2))
    got = minidl.linalg.lstsq(minidl.tensor(a), minidl.tensor(b), driver=driver)
    want = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
    assert type(got).__name__ == "linalg_lstsq"
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape), (driver, g.shape, w.shape)
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-10, atol=1e-10)


def test_matrix_rank_tolerances_as_torch():
    u, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    a = (u * np.array([3.0, 1.0, 1e-3, 1e-9, 0.0])) @ u.T
    m, t = both(a)
    for kwargs in ({}, {"atol": 1e-2}, {"rtol": 1e-4}, {"atol": 1e-12, "rtol": 0.0}, {"hermitian": True}):
        assert int(minidl.linalg.matrix_rank(m, **kwargs)) == int(torch.linalg.matrix_rank(t, **kwargs)), kwargs


@pytest.mark.parametrize("shape", [(3, 0), (2, 3, 0)])
def test_lu_of_a_matrix_without_columns_has_the_identity_permutation(shape):
    m, t = both(np.zeros(shape))
    for got, want in zip(minidl.linalg.lu(m), torch.linalg.lu(t)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("shape, p", [((0, 0), None), ((2, 0, 0), None), ((3, 0), 2), ((2, 0, 0), "fro"),
                                      ((0, 0), 1)])
def test_cond_of_an_empty_matrix_is_zero_as_torch(shape, p):
    m, t = both(np.zeros(shape))
    np.testing.assert_array_equal(minidl.linalg.cond(m, p).numpy(), torch.linalg.cond(t, p).numpy())


def test_lstsq_takes_a_vector_right_hand_side_as_torch():
    a, b = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5))
    got = minidl.linalg.lstsq(minidl.tensor(a), minidl.tensor(b)).solution
    want = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b)).solution
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-10)
    with pytest.raises(RuntimeError, match=r"input.size\(-2\) should match other.size\(-1\)"):
        minidl.linalg.lstsq(minidl.tensor(a[0]), minidl.tensor(b[0, :4]))


@pytest.mark.parametrize("bad", [float("inf"), -float("inf"), float("nan")])
def test_matrix_exp_of_a_non_finite_matrix_as_torch(bad):
    a = np.array([[bad, 0.0], [0.0, 1.0]])
    want = torch.linalg.matrix_exp(torch.tensor(a)).numpy()
    np.testing.assert_array_equal(minidl.linalg.matrix_exp(minidl.tensor(a)).numpy(), want)


def test_torch_svd_returns_v_and_zeros_without_compute_uv():
    a = rng.standard_normal((4, 3))
    m, t = both(a)
    got, want = minidl.svd(m, compute_uv=False), torch.svd(t, compute_uv=False)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), atol=1e-12)
    u, s, v = minidl.svd(m)
    np.testing.assert_allclose((u.numpy() * s.numpy()) @ v.numpy().T, a, atol=1e-12)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_reads_only_the_triangle_it_is_asked_for(upper):
    x = rng.standard_normal((3, 3))
    a = x @ x.T + np.eye(3)
    a[(2, 0) if upper else (0, 2)] += 50.0   # (the other triangle: ignored; read, it would not be definite)
    got = minidl.linalg.cholesky(minidl.tensor(a), upper=upper)
    np.testing.assert_allclose(got.numpy(), torch.linalg.cholesky(torch.tensor(a), upper=upper).numpy(), atol=1e-12)


def test_det_gradient_at_a_singular_matrix_is_its_cofactor_matrix():
    """There A has no inverse for det A^{-T}; the cofactors (signed minors, computed here by numpy) are the
    derivative. (torch 2.13 gives zeros there, from its LU's division by the zero pivot.)"""
    a = rng.standard_normal((2, 3, 3))
    a[0, :, 2] = 0.0
    a[1] = np.diag([1.0, 2.0, 0.0])
    m = minidl.tensor(a, requires_grad=True)
    minidl.linalg.det(m).sum().backward()
    minor = [[[np.linalg.det(np.delete(np.delete(x, i, 0), j, 1)) * (-1) ** (i + j) for j in range(3)]
              for i in range(3)] for x in a]
    np.testing.assert_allclose(m.grad.numpy(), np.array(minor), atol=1e-12)


def test_factorisations_reconstruct_their_input():
    a = rng.standard_normal((2, 4, 3))
    m = minidl.tensor(a)
    p, low, up = minidl.linalg.lu(m)
    np.testing.assert_allclose((p @ low @ up).numpy(), a, atol=1e-12)
    q, r = minidl.linalg.qr(m, mode="complete")
    np.testing.assert_allclose((q @ r).numpy(), a, atol=1e-12)
    sym = a[..., :3, :] + a[..., :3, :].swapaxes(-1, -2)
    w, v = minidl.linalg.eigh(minidl.tensor(sym))
    np.testing.assert_allclose((v.numpy() * w.numpy()[..., None, :]) @ v.numpy().swapaxes(-1, -2), sym, atol=1e-12)


@pytest.mark.parametrize("upper, left", [(True, True), (False, False)])
def test_triangular_solve_across_blocks_of_rows_as_torch(upper, left):
    """Past kernels/lapack.py's BLOCK rows the solve substitutes block by block; the op corpus's matrices are
    smaller than one block."""
    n = lapack.BLOCK * 2 + 5
    a = rng.standard_normal((2, n, n)) + n * np.eye(n)
    b = rng.standard_normal((2, n, 3) if left else (2, 3, n))
    got = minidl.linalg.solve_triangular(minidl.tensor(a), minidl.tensor(b), upper=upper, left=left)
    want = torch.linalg.solve_triangular(torch.tensor(a), torch.tensor(b), upper=upper, left=left)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-14)


def test_cholesky_solve_gradient_of_the_factor_is_torchs_dense_one():
    x = rng.standard_normal((3, 3))
    low = np.linalg.cholesky(x @ x.T + np.eye(3))
    b = rng.standard_normal((3, 2))
    grads = []
    for lib in (minidl, torch):
        lt, bt = lib.tensor(low, requires_grad=True), lib.tensor(b)
        lib.cholesky_solve(bt, lt).sum().backward()
        grads.append(lt.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- the primitive
def test_linalg_is_a_primitive_with_a_kernel_on_both_devices():
    assert "linalg" in kernels.PRIMITIVES and kernels.WRITES["linalg"] == ("outs",)
    assert kernels.lookup("linalg", "cpu") is not None and kernels.lookup("linalg", "cuda") is not None
    with pytest.raises(ValueError, match="unknown op 'lq'.*cholesky"):
        lapack.run(np, "lq", [], ())


def test_cuda_factorisations_and_their_errors_match_the_cpu():
    cuda_device()
    a = np.stack([np.eye(3) * 2, np.diag([1.0, -1.0, 1.0])])
    with pytest.raises(LinAlgError, match=r"\(Batch element 1\).*minor of order 2"):
        minidl.linalg.cholesky(minidl.tensor(a, device="cuda"))
    b = singular_batch()
    for op in (minidl.linalg.lu_factor_ex, minidl.linalg.inv_ex):
        got, want = op(minidl.tensor(b, device="cuda")), op(minidl.tensor(b))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.cpu().numpy(), w.numpy(), rtol=1e-12, atol=1e-12)


def test_onnx_export_of_a_factorisation_is_refused_naming_the_op():
    with pytest.raises(OnnxExporterError, match="linalg_qr"):
        minidl.onnx.export(lambda x: minidl.linalg.qr(x).R, (minidl.eye(3),))
