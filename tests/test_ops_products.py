"""The products and norms (minidl/ops/products.py, norms.py) against PyTorch where the corpus and the registry
sweeps do not look: torch.cross's deprecated default dim, tensordot's forms of ``dims``, multi_dot's order,
matrix_power's 0th power, the norms' gradients at zero and their dtype rules, the errors that name the op,
the norms' lowerings in ONNX Runtime, and autocast's policies (torch's CPU autocast and its CUDA lists)."""
from __future__ import annotations

import io
import math
import warnings

import numpy as np
import onnxruntime
import pytest

import minidl
from minidl.onnx import TracerWarning
from minidl.ops.products import _chain_order

from cuda_support import cuda  # noqa: F401  (the fixture)
from test_amp import LOW, _run_case, close, f, h, name_of

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(45)


def same(got, want, tol=1e-12):
    """got (minidl) holds torch's values, dtype and shape."""
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=tol, atol=tol)


def pair(*shape, values=None):
    """The same float64 values as a minidl and a torch leaf requiring grad."""
    a = RNG.standard_normal(shape) if values is None else np.asarray(values, dtype=np.float64)
    return minidl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def test_cross_without_dim_warns_and_takes_the_first_dim_of_size_3():
    (a, ta), (b, tb) = pair(4, 3, 3), pair(4, 3, 3)
    with pytest.warns(UserWarning, match="without specifying the dim arg is deprecated"):
        got = minidl.cross(a, b)
    same(got, torch.linalg.cross(ta, tb, dim=1))
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="no dimension of size 3"):
        minidl.cross(minidl.ones(4, 2), minidl.ones(4, 2))


def test_cross_errors_name_the_op_and_shapes():
    with pytest.raises(RuntimeError, match=r"linalg.cross: inputs dimension 0 must have length 3. Got 3 and 4"):
        minidl.linalg.cross(minidl.ones(3, 4), minidl.ones(4, 3), dim=0)
    with pytest.raises(RuntimeError, match=r"same number of dimensions.*\[2, 3\] and \[3\]"):
        minidl.linalg.cross(minidl.ones(2, 3), minidl.ones(3))
    with pytest.raises(RuntimeError, match="same dtype.*float32 and float64"):
        minidl.linalg.cross(minidl.ones(3), minidl.ones(3, dtype=minidl.float64))


@pytest.mark.parametrize("dims", [1, (1, 0), ([1], [0]), "tensor-count", "tensor-lists"])
def test_tensordot_takes_every_form_of_dims(dims):
    (a, ta), (b, tb) = pair(2, 3), pair(3, 4)
    if dims == "tensor-count":
        dims, their_dims = minidl.tensor(1), torch.tensor(1)
    elif dims == "tensor-lists":
        dims, their_dims = minidl.tensor([[1], [0]]), torch.tensor([[1], [0]])
    else:
        their_dims = ([dims[0]], [dims[1]]) if dims == (1, 0) else dims   # (torch wants lists there)
    same(minidl.tensordot(a, b, dims), torch.tensordot(ta, tb, their_dims))


def test_tensordot_and_inner_over_an_empty_dim_are_zeros():
    (a, ta), (b, tb) = pair(2, 0), pair(0, 3)
    same(minidl.tensordot(a, b, 1), torch.tensordot(ta, tb, 1))
    same(minidl.inner(a, b.transpose(0, 1)), torch.inner(ta, tb.transpose(0, 1)))


def test_tensordot_errors():
    a, b = minidl.ones(2, 3), minidl.ones(3, 4)
    with pytest.raises(RuntimeError, match="dims >= 0, but got dims=-1"):
        minidl.tensordot(a, b, -1)
    with pytest.raises(RuntimeError, match="dims < ndim_a or ndim_b, but got dims=3"):
        minidl.tensordot(a, b, 3)
    with pytest.raises(RuntimeError, match="first has size 3 in dim 1 and second has size 4 in dim 1"):
        minidl.tensordot(a, b, ([1], [1]))


def test_multi_dot_multiplies_in_the_cheapest_order():
    """The textbook chain (CLRS 15.2: 30x35, 35x15, 15x5, 5x10, 10x20, 20x25) splits as ((A1 (A2 A3)) ((A4 A5) A6))."""
    split = _chain_order([30, 35, 15, 5, 10, 20, 25])
    assert split[0][5] == 2 and split[0][2] == 0 and split[3][5] == 4
    mats = [pair(*s) for s in ((5,), (5, 2), (2, 6), (6,))]
    same(minidl.linalg.multi_dot([m for m, _ in mats]), torch.linalg.multi_dot([t for _, t in mats]))


def test_multi_dot_and_chain_matmul_errors():
    with pytest.raises(RuntimeError, match="expected at least 2 tensors but got 1"):
        minidl.linalg.multi_dot([minidl.ones(3)])
    with pytest.raises(RuntimeError, match="tensor 1 must be 2D but got 1D"):
        minidl.linalg.multi_dot([minidl.ones(2, 3), minidl.ones(3), minidl.ones(3, 3)])
    with pytest.raises(RuntimeError, match=r"tensors 0 and 1 with shapes \[2, 3\] and \[4, 3\] cannot be multiplied"):
        minidl.linalg.multi_dot([minidl.ones(2, 3), minidl.ones(4, 3)])
    with pytest.raises(RuntimeError, match="tensor 0 is float32 and tensor 1 is float64"):
        minidl.linalg.multi_dot([minidl.ones(2, 3), minidl.ones(3, 2, dtype=minidl.float64)])
    with pytest.raises(RuntimeError, match="chain_matmul: tensor 1 must be 2D"):
        minidl.chain_matmul(minidl.ones(3, 3), minidl.ones(3))
    (a, ta), (b, tb) = pair(2, 3), pair(3, 2)
    same(minidl.chain_matmul(a), a.detach())
    same(minidl.chain_matmul(a, b), torch.linalg.multi_dot([ta, tb]))


def test_matrix_power_zero_is_the_identity_with_a_zero_gradient():
    a, ta = pair(2, 3, 3)
    got, want = minidl.linalg.matrix_power(a, 0), torch.linalg.matrix_power(ta, 0)
    same(got, want)
    got.sum().backward()
    want.sum().backward()
    same(a.grad, ta.grad)
    same(a.matrix_power(5), torch.matrix_power(ta, 5), tol=1e-10)


def test_matrix_power_errors():
    with pytest.raises(RuntimeError, match="batches of square matrices, but they are 3 by 4 matrices"):
        minidl.linalg.matrix_power(minidl.ones(2, 3, 4), 2)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        minidl.linalg.matrix_power(minidl.ones(3), 2)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "float64"])
def test_vander_dtypes(dtype):
    x = np.array([[1, 2, 3], [0, 4, 5]])
    same(minidl.linalg.vander(minidl.tensor(x, dtype=getattr(minidl, dtype)), N=4),
         torch.linalg.vander(torch.tensor(x, dtype=getattr(torch, dtype)), N=4))
    with pytest.raises(RuntimeError, match="N must be greater than 1"):
        minidl.linalg.vander(minidl.ones(3), N=1)
    with pytest.raises(RuntimeError, match="integer tensors, but got Bool"):   # (torch refuses bool too)
        torch.linalg.vander(torch.ones(3, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="integer tensors, but got bool"):
        minidl.linalg.vander(minidl.ones(3, dtype=minidl.bool))


@pytest.mark.parametrize("ord", [0, 0.5, 1, 2, 3, math.inf, -math.inf, -1, -2.5])
def test_vector_norm_gradient_at_zero_is_torchs(ord):
    values = [[0.0, 1.5, -2.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.5, -1.0, 2.0, 3.0]]
    (x, tx) = pair(values=values)
    got, want = minidl.linalg.vector_norm(x, ord, dim=1), torch.linalg.vector_norm(tx, ord, dim=1)
    same(got, want)
    got.backward(minidl.tensor([1.0, 2.0, 3.0], dtype=minidl.float64))
    want.backward(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    same(x.grad, torch.zeros_like(tx) if tx.grad is None else tx.grad)   # (ord 0: torch leaves no gradient)


def test_vector_norm_dtype_rules():
    x = minidl.ones(3)
    assert minidl.linalg.vector_norm(x, dtype=minidl.float64).dtype is minidl.float64
    with pytest.raises(RuntimeError, match="floating point tensor as input. Got int64"):
        minidl.linalg.vector_norm(minidl.ones(3, dtype=minidl.int64))
    with pytest.raises(RuntimeError, match=r"input \(float64\) should be convertible without narrowing .*\(float32\)"):
        minidl.linalg.vector_norm(minidl.ones(3, dtype=minidl.float64), dtype=minidl.float32)
    with pytest.raises(RuntimeError, match="dtype should be floating point, but got int64"):
        minidl.linalg.vector_norm(x, dtype=minidl.int64)
    with pytest.raises(RuntimeError, match="cannot compute the inf norm on an empty tensor"):
        minidl.linalg.vector_norm(minidl.ones(0, 3), math.inf)
    with pytest.raises(TypeError, match="ord must be a number"):
        minidl.linalg.vector_norm(x, "fro")


def test_matrix_norm_and_norm_errors():
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        minidl.linalg.matrix_norm(minidl.ones(3), 1)
    with pytest.raises(RuntimeError, match="Order 3 not supported"):
        minidl.linalg.matrix_norm(minidl.ones(3, 3), 3)
    with pytest.raises(RuntimeError, match=r"dims must be different. Got \(0, 0\)"):
        minidl.linalg.matrix_norm(minidl.ones(3, 3), 1, dim=(0, 0))
    with pytest.raises(RuntimeError, match="the input must be 1D or 2D. Got 3D"):
        minidl.linalg.norm(minidl.ones(2, 3, 3), 1)
    with pytest.raises(RuntimeError, match=r"must be of length 1 or 2. Got \[0, 1, 2\]"):
        minidl.linalg.norm(minidl.ones(2, 3, 3), 2, dim=(0, 1, 2))


def test_matrix_norm_of_an_empty_matrix():
    for ord in (1, math.inf, "fro"):
        same(minidl.linalg.matrix_norm(minidl.ones(0, 5, dtype=minidl.float64), ord),
             torch.linalg.matrix_norm(torch.ones(0, 5, dtype=torch.float64), ord))


def test_addr_of_bools_is_logical():
    x, v, w = np.array([[True, False], [False, False]]), np.array([True, False]), np.array([False, True])
    for beta, alpha in ((1, 1), (0, 1), (True, False)):
        same(minidl.addr(minidl.tensor(x), minidl.tensor(v), minidl.tensor(w), beta=beta, alpha=alpha),
             torch.addr(torch.tensor(x), torch.tensor(v), torch.tensor(w), beta=beta, alpha=alpha))


@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_addr_of_integers_refuses_float_factors_as_torch(dtype):
    x, v = np.ones((2, 2), dtype), np.ones(2, dtype)
    for factors in (dict(beta=0.5), dict(alpha=1.0)):
        name = next(iter(factors))
        with pytest.raises(RuntimeError, match=f"argument {name} must not be a floating point number"):
            torch.addr(torch.tensor(x), torch.tensor(v), torch.tensor(v), **factors)
        with pytest.raises(RuntimeError, match=f"addr: For integral input tensors, argument {name} must not be"):
            minidl.addr(minidl.tensor(x), minidl.tensor(v), minidl.tensor(v), **factors)
    same(minidl.addr(minidl.tensor(x), minidl.tensor(v), minidl.tensor(v), alpha=2),
         torch.addr(torch.tensor(x), torch.tensor(v), torch.tensor(v), alpha=2))


def test_product_errors_name_the_op():
    with pytest.raises(RuntimeError, match=r"mv: expected a matrix and a vector, got shapes \[2, 3\] and \[3, 1\]"):
        minidl.mv(minidl.ones(2, 3), minidl.ones(3, 1))
    with pytest.raises(RuntimeError, match=r"addr: Expected 1-D argument vec1, but got 2-D"):
        minidl.addr(minidl.ones(2, 3), minidl.ones(2, 3), minidl.ones(3))
    with pytest.raises(RuntimeError, match="same number of batches, got 2 and 3"):
        minidl.addbmm(minidl.ones(3), minidl.ones(2, 2, 4), minidl.ones(3, 4, 3))
    with pytest.raises(RuntimeError, match=r"inner\(\) the last dimension must match .* \[2, 3\] and \[4\]"):
        minidl.inner(minidl.ones(2, 3), minidl.ones(4))
    with pytest.raises(RuntimeError, match="linalg.vecdot: expected both operands to have the same dtype"):
        minidl.linalg.vecdot(minidl.ones(3), minidl.ones(3, dtype=minidl.float64))


@pytest.mark.parametrize("fn", [
    lambda x: minidl.norm(x, 0, dim=1),
    lambda x: minidl.norm(x, -math.inf, dim=0, keepdim=True),
    lambda x: minidl.norm(x, -1.5, dim=1),
    lambda x: minidl.norm(x[0, 0], 3),
    lambda x: minidl.linalg.vector_norm(x, 0.5, dtype=minidl.float64),
    lambda x: minidl.linalg.matrix_norm(x, -math.inf),
    lambda x: minidl.linalg.diagonal(x, offset=-1),
    lambda x: minidl.linalg.diagonal(x.reshape(1, 3, 4), offset=2, dim1=2, dim2=1),
])
def test_norm_and_diagonal_lowerings_run_in_onnx_runtime(fn):
    x = minidl.tensor([[1.0, -2.0, 0.0, 0.5], [3.0, 0.25, -1.0, 2.0], [0.0, 1.5, 4.0, -0.75]])
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TracerWarning)   # (linalg.diagonal's: its places are fixed, as expected)
        minidl.onnx.export(fn, (x,), buffer, input_names=["x"], output_names=["out"])
    session = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    got, want = session.run(None, {"x": x.numpy()})[0], fn(x).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


# (name, fn(lib, F, *inputs), inputs, dtype on 'cuda': torch's CUDA lists in its autocast_mode.h), as test_amp's CASES
AUTOCAST = [
    ("mv", lambda t, F, a, b: t.mv(a, b), [f(3, 4), f(4)], "float16"),
    ("addmv", lambda t, F, x, a, b: t.addmv(x, a, b, beta=0.5), [f(3), f(3, 4), f(4)], "float16"),
    ("addr", lambda t, F, x, a, b: x.addr(a, b, alpha=2), [f(3, 4), f(3), f(4)], "float16"),
    ("addbmm", lambda t, F, x, a, b: t.addbmm(x, a, b), [f(3, 2), f(2, 3, 4), f(2, 4, 2)], "float16"),
    ("vecdot", lambda t, F, a, b: t.linalg.vecdot(a, b), [f(3, 4), f(3, 4)], "float16"),
    ("multi_dot", lambda t, F, a, b, c: t.linalg.multi_dot([a, b, c]), [f(3, 4), f(4, 2), f(2, 2)], "float16"),
    ("tensordot", lambda t, F, a, b: t.tensordot(a, b, 1), [f(3, 4), f(4, 2)], "float32"),
    ("inner", lambda t, F, a, b: t.inner(a, b), [f(3, 4), f(2, 4)], "float32"),
    ("vdot", lambda t, F, a, b: t.vdot(a, b), [f(4), f(4)], "float32"),
    ("cross", lambda t, F, a, b: t.cross(a, b, dim=1), [h(4, 3), h(4, 3)], "float16"),
    ("vector_norm", lambda t, F, x: t.linalg.vector_norm(x, 3, dim=1), [h(3, 4)], "float32"),
    ("matrix_norm", lambda t, F, x: t.linalg.matrix_norm(x, 1), [h(3, 4)], "float32"),
    ("linalg_norm", lambda t, F, x: t.linalg.norm(x), [h(3, 4)], "float32"),
    ("matrix_power", lambda t, F, x: t.linalg.matrix_power(x, 2), [f(3, 3)], "float16"),
]


@pytest.mark.parametrize("low", list(LOW))
@pytest.mark.parametrize("name, fn, specs, cuda_dtype", AUTOCAST, ids=[c[0] for c in AUTOCAST])
def test_cpu_autocast_runs_each_product_in_torchs_dtype(name, fn, specs, cuda_dtype, low):
    (out, ours), (ref, theirs) = _run_case(fn, specs, low)
    assert name_of(out.dtype) == name_of(ref.dtype)
    close(out, ref, low, scale=2)
    for mine, its in zip(ours, theirs):
        close(mine.grad, its.grad, low, scale=2)


@pytest.mark.parametrize("name, fn, specs, cuda_dtype", AUTOCAST, ids=[c[0] for c in AUTOCAST])
def test_cuda_autocast_follows_torchs_cuda_lists(cuda, name, fn, specs, cuda_dtype):
    (out, ours), (ref, theirs) = _run_case(fn, specs, "float16", device="cuda")
    assert out.device.type == "cuda" and name_of(out.dtype) == cuda_dtype
    close(out, ref, "float16", scale=2)
