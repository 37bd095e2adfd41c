"""Layer, RMS and group norm on the norm_rows primitives (F.layer_norm, F.rms_norm, F.group_norm, nn.RMSNorm).

Oracles: PyTorch (forward and every gradient in float64, float32 within tolerance, the API and errors of
torch.nn.RMSNorm), the unfused composition of the same norms written here with minidl's elementwise ops and
reductions, and finite differences for second order. The CUDA kernels run on the simulator where there
is no GPU (cuda_support.py) and must give the CPU kernels' results.
"""
from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl import kernels
from test_gradcheck import gradgradcheck

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(40)

# (name, minidl call, torch call, x shape, parameter shape or None)
CASES = [
    ("layer_norm", lambda m, x, w, b: m.nn.functional.layer_norm(x, (6,), w, b), (3, 4, 6), (6,)),
    ("layer_norm-2d", lambda m, x, w, b: m.nn.functional.layer_norm(x, (4, 6), w, b, eps=1e-3), (3, 4, 6), (4, 6)),
    ("layer_norm-no-affine", lambda m, x, w, b: m.nn.functional.layer_norm(x, [6]), (5, 6), None),
    ("layer_norm-long-row", lambda m, x, w, b: m.nn.functional.layer_norm(x, (1100,), w, b), (2, 1100), (1100,)),
    ("rms_norm", lambda m, x, w, b: m.nn.functional.rms_norm(x, [6], w), (3, 4, 6), (6,)),
    ("rms_norm-eps", lambda m, x, w, b: m.nn.functional.rms_norm(x, [4, 6], w, eps=1e-2), (3, 4, 6), (4, 6)),
    ("rms_norm-no-weight", lambda m, x, w, b: m.nn.functional.rms_norm(x, [6]), (5, 6), None),
    ("group_norm", lambda m, x, w, b: m.nn.functional.group_norm(x, 3, w, b), (2, 6, 4, 5), (6,)),
    ("group_norm-1d", lambda m, x, w, b: m.nn.functional.group_norm(x, 2, w, b, eps=1e-3), (3, 4, 7), (4,)),
    ("group_norm-no-spatial", lambda m, x, w, b: m.nn.functional.group_norm(x, 4, w, b), (3, 8), (8,)),
    ("group_norm-no-affine", lambda m, x, w, b: m.nn.functional.group_norm(x, 1), (2, 4, 3), None),
]


def _arrays(xshape, pshape, shift=0.0):
    x = RNG.standard_normal(xshape) * 2.0 + shift
    return x, (None if pshape is None else RNG.standard_normal(pshape)), \
        (None if pshape is None else RNG.standard_normal(pshape))


def _run(lib, fn, arrays, g, dtype, device=None):
    """fn's output and the gradients of every input given (None where an input is None)."""
    if lib is torch:
        leaves = [None if a is None else torch.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]
        out = fn(torch, *leaves)
        out.backward(torch.tensor(g, dtype=dtype))
        return (out.detach().double().numpy(),
                [None if t is None or t.grad is None else t.grad.double().numpy() for t in leaves])
    leaves = [None if a is None else minidl.tensor(a, dtype=dtype, device=device, requires_grad=True)
              for a in arrays]
    out = fn(minidl, *leaves)
    out.backward(minidl.tensor(g, dtype=dtype, device=device))
    return (out.detach().cpu().double().numpy(),
            [None if t is None or t.grad is None else t.grad.cpu().double().numpy() for t in leaves])


def _close(got, want, rtol, atol):
    np.testing.assert_allclose(got[0], want[0], rtol=rtol, atol=atol)
    for a, b in zip(got[1], want[1]):
        if b is not None:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name, fn, xshape, pshape", CASES, ids=[c[0] for c in CASES])
def test_against_torch_float64(name, fn, xshape, pshape):
    arrays = _arrays(xshape, pshape, shift=3.0)
    g = RNG.standard_normal(xshape)
    _close(_run(minidl, fn, arrays, g, minidl.float64), _run(torch, fn, arrays, g, torch.float64), 1e-10, 1e-10)


@pytest.mark.parametrize("name, fn, xshape, pshape", CASES, ids=[c[0] for c in CASES])
def test_against_torch_float32(name, fn, xshape, pshape):
    """A large offset against a small spread: the moments must not lose the spread (two passes, not
    E[x^2] - E[x]^2). Against float64, each result is within a few times torch's own float32 error."""
    arrays = _arrays(xshape, pshape, shift=300.0)
    g = RNG.standard_normal(xshape)
    exact = _run(torch, fn, arrays, g, torch.float64)
    ours, theirs = _run(minidl, fn, arrays, g, minidl.float32), _run(torch, fn, arrays, g, torch.float32)
    for a, b, want in zip([ours[0], *ours[1]], [theirs[0], *theirs[1]], [exact[0], *exact[1]]):
        if want is not None:
            scale = np.abs(want).max()
            assert np.abs(a - want).max() <= 4 * np.abs(b - want).max() + 1e-5 * scale


def _composed(kind, x, w, b, shape_or_groups, eps):
    """The unfused norms in minidl's elementwise ops and reductions."""
    if kind == "group_norm":
        n, c = x.shape[0], x.shape[1]
        xr = x.reshape(n, shape_or_groups, -1)
        centered = xr - xr.mean(-1, keepdim=True)
        out = (centered * ((centered * centered).mean(-1, keepdim=True) + eps).rsqrt()).reshape(tuple(x.shape))
        channel = (1, c) + (1,) * (x.ndim - 2)
        return out * w.reshape(channel) + b.reshape(channel)
    dims = tuple(range(x.ndim - len(shape_or_groups), x.ndim))
    centered = x if kind == "rms_norm" else x - x.mean(dims, keepdim=True)
    out = centered * ((centered * centered).mean(dims, keepdim=True) + eps).rsqrt() * w
    return out if kind == "rms_norm" else out + b


@pytest.mark.parametrize("kind, call, xshape, arg", [
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (3, 5), w, b, 1e-4), (4, 3, 5), (3, 5)),
    ("rms_norm", lambda x, w, b: F.rms_norm(x, (5,), w, 1e-4), (4, 3, 5), (5,)),
    ("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b, 1e-4), (3, 4, 2, 3), 2),
])
def test_same_as_the_unfused_composition(kind, call, xshape, arg):
    pshape = (xshape[1],) if kind == "group_norm" else arg
    arrays = _arrays(xshape, pshape, shift=1.0)
    g = minidl.tensor(RNG.standard_normal(xshape))
    results = []
    for fn in (call, lambda x, w, b: _composed(kind, x, w, b, arg, 1e-4)):
        leaves = [minidl.tensor(a, requires_grad=True) for a in arrays]
        out = fn(*leaves)
        out.backward(g)
        results.append([out.detach().numpy()] + [t.grad.numpy() for t in leaves[:2 if kind == "rms_norm" else 3]])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-11)


@pytest.fixture
def calls(monkeypatch):
    """How many times each norm_rows primitive runs on the CPU."""
    count = {"norm_rows": 0, "norm_rows_backward": 0}
    for name in count:
        fn = kernels.get(name, "cpu")

        def counted(*args, _fn=fn, _name=name):
            count[_name] += 1
            return _fn(*args)
        monkeypatch.setitem(kernels._registry, ("cpu", name), counted)
    return count


@pytest.mark.parametrize("call", [lambda x, w: F.layer_norm(x, (4,), w, w * 2),
                                  lambda x, w: F.rms_norm(x, (4,), w),
                                  lambda x, w: F.group_norm(x.reshape(3, 4, 1), 2, w, w).reshape(3, 4)])
def test_one_kernel_each_way(calls, call):
    x = minidl.tensor(RNG.standard_normal((3, 4)), requires_grad=True)
    w = minidl.tensor(RNG.standard_normal(4), requires_grad=True)
    call(x, w).sum().backward()
    assert calls == {"norm_rows": 1, "norm_rows_backward": 1}


@pytest.mark.parametrize("call, shapes", [
    (lambda x, w, b: F.layer_norm(x, (2, 3), w, b), [(2, 2, 3), (2, 3), (2, 3)]),
    (lambda x, w: F.rms_norm(x, (3,), w), [(2, 3), (3,)]),
    (lambda x, w, b: F.group_norm(x, 2, w, b), [(2, 4, 3), (4,), (4,)]),
])
def test_second_order(call, shapes):
    gradgradcheck(call, [RNG.standard_normal(s) for s in shapes])


def test_rms_norm_eps_none_is_the_dtypes_epsilon():
    """eps None: float32's epsilon for float32 (and for half, computed in float32), float64's for float64."""
    x = np.full((2, 3), 1e-4)  # mean square 1e-8: float32's epsilon (1.2e-7) matters, float64's not
    for md, td in ((minidl.float32, torch.float32), (minidl.float64, torch.float64)):
        got = F.rms_norm(minidl.tensor(x, dtype=md), [3]).double().numpy()
        np.testing.assert_allclose(got, torch.nn.functional.rms_norm(torch.tensor(x, dtype=td), [3]).double().numpy(),
                                   rtol=1e-6)
    half = F.rms_norm(minidl.tensor(x, dtype=minidl.float16), [3])
    assert half.dtype is minidl.float16
    want = torch.nn.functional.rms_norm(torch.tensor(x, dtype=torch.float16), [3])
    np.testing.assert_allclose(half.double().numpy(), want.double().numpy(), rtol=1e-3)


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # (torch's, not ours)
def test_mixed_half_input_with_float32_weight():
    x, w = RNG.standard_normal((3, 8)), RNG.standard_normal(8)
    for md, td in ((minidl.float16, torch.float16), (minidl.bfloat16, torch.bfloat16)):
        got = F.rms_norm(minidl.tensor(x, dtype=md), (8,), minidl.tensor(w, dtype=minidl.float32))
        want = torch.nn.functional.rms_norm(torch.tensor(x, dtype=td), (8,), torch.tensor(w, dtype=torch.float32))
        assert got.dtype is md and want.dtype is td
        np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=2e-2, atol=2e-2)


def test_rms_norm_module_as_torch():
    m, tm = nn.RMSNorm([2, 3], dtype=minidl.float64), torch.nn.RMSNorm([2, 3], dtype=torch.float64)
    assert repr(m) == repr(tm) == "RMSNorm((2, 3), eps=None, elementwise_affine=True)"
    assert repr(nn.RMSNorm(4, eps=1e-3, elementwise_affine=False)) == repr(
        torch.nn.RMSNorm(4, eps=1e-3, elementwise_affine=False))
    assert list(m.state_dict()) == list(tm.state_dict()) == ["weight"]
    assert nn.RMSNorm(4, elementwise_affine=False).weight is None
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(RNG.standard_normal((2, 3))))
    m.load_state_dict({"weight": minidl.tensor(tm.weight.detach().numpy())})
    x = RNG.standard_normal((4, 2, 3))
    np.testing.assert_allclose(m(minidl.tensor(x)).detach().numpy(), tm(torch.tensor(x)).detach().numpy(),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda: F.layer_norm(minidl.ones(2, 3), (4,)), r"layer_norm: .*normalized_shape=\[4\]"),
    (lambda: F.layer_norm(minidl.ones(2, 3), (3,), minidl.ones(2)), r"layer_norm: expected weight of shape \[3\]"),
    (lambda: F.layer_norm(minidl.ones(2, 3), (3,), None, minidl.ones(4)), r"layer_norm: expected bias of shape"),
    (lambda: F.rms_norm(minidl.ones(2, 3), (2, 3, 3)), r"rms_norm: .*normalized_shape=\[2, 3, 3\]"),
    (lambda: F.rms_norm(minidl.ones(2, 3), (3,), minidl.ones(3, 1)), r"rms_norm: expected weight of shape \[3\]"),
    (lambda: F.group_norm(minidl.ones(2, 3, 4), 2), r"group_norm: .*divisible by 2"),
    (lambda: F.group_norm(minidl.ones(2, 4, 4), 2, minidl.ones(3)), r"group_norm: expected weight of shape \[4\]"),
])
def test_bad_shapes_are_errors_naming_the_op(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_integer_input_is_an_error():
    with pytest.raises(TypeError, match="layer_norm: expected a floating point input"):
        F.layer_norm(minidl.ones(2, 3, dtype=minidl.int64), (3,))


@pytest.mark.parametrize("bad, message", [
    (dict(n=5), "does not hold whole rows"), (dict(span=4), "invalid row geometry"),
    (dict(w=np.ones(3)), "parameter buffer"), (dict(mean=np.ones(1)), "mean buffer"),
])
def test_kernel_checks_its_buffers(bad, message):
    args = dict(x=np.ones(12), w=np.ones(6), b=None, out=np.empty(12), mean=np.empty(2), rstd=np.empty(2), n=6,
                span=1, cycle=1, eps=1e-5, rms=False)
    args.update(bad)
    with pytest.raises(ValueError, match=message):
        kernels.get("norm_rows", "cpu")(*args.values())


# ----------------------------------------------------------------------------- CUDA (simulator without a GPU)
@pytest.fixture
def cuda():
    from cuda_support import cuda_device
    return cuda_device()


@pytest.mark.parametrize("name, fn, xshape, pshape", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cuda_against_torch(cuda, name, fn, xshape, pshape, dtype):
    arrays = _arrays(xshape, pshape, shift=3.0)
    g = RNG.standard_normal(xshape)
    want = _run(torch, fn, arrays, g, torch.float64)
    tol = 1e-10 if dtype == "float64" else 2e-4
    _close(_run(minidl, fn, arrays, g, getattr(minidl, dtype), "cuda"), want, tol, tol)


def test_cuda_second_order(cuda):
    x = minidl.tensor(RNG.standard_normal((2, 4, 3)), device="cuda", requires_grad=True)
    w = minidl.tensor(RNG.standard_normal(4), device="cuda", requires_grad=True)
    tx, tw = (torch.tensor(t.detach().cpu().numpy(), requires_grad=True) for t in (x, w))
    gx, = minidl.autograd.grad((F.group_norm(x, 2, w) ** 2).sum(), x, create_graph=True)
    tgx, = torch.autograd.grad((torch.nn.functional.group_norm(tx, 2, tw) ** 2).sum(), tx, create_graph=True)
    (gx * gx).sum().backward()
    (tgx * tgx).sum().backward()
    np.testing.assert_allclose(w.grad.cpu().numpy(), tw.grad.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("n, span, cycle", [(6, 1, 1), (6, 3, 2)])
def test_parallel_blocks_add_their_parameter_gradients(n, span, cycle):
    """The parallel kernels (threads take blocks of rows above a size threshold) on a small input in 3 blocks:
    each block's parameter gradient sums must add up to torch's (group norm seen as (N, cycle, n/span, span))."""
    from minidl.kernels.cpu.jit.norm_rows import norm_rows_backward_parallel, norm_rows_parallel
    rows, blocks, params = 8 * cycle, 3, cycle * (n // span)
    x, w, b = _arrays((rows * n,), (params,), shift=1.0)
    g = RNG.standard_normal(rows * n)
    out, mean, rstd, dx = np.empty_like(x), np.empty(rows), np.empty(rows), np.empty_like(x)
    pw, pb = np.zeros(blocks * params), np.zeros(blocks * params)
    norm_rows_parallel(x, w, b, out, mean, rstd, rows, n, span, cycle, 1e-5, False, 0.0, 1 / n, blocks)
    norm_rows_backward_parallel(x, w, mean, rstd, g, dx, True, pw, pb, rows, n, span, cycle, False, 0.0, 1 / n, blocks)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    shape = (rows // cycle, params) + ((span,) if span > 1 else ())
    ty = torch.nn.functional.group_norm(tx.reshape(shape), cycle, tw, tb) if span > 1 else \
        torch.nn.functional.layer_norm(tx.reshape(rows, n), (n,), tw, tb)
    ty.backward(torch.tensor(g).reshape(ty.shape))
    np.testing.assert_allclose(out, ty.detach().numpy().reshape(-1), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(pw.reshape(blocks, params).sum(0), tw.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(pb.reshape(blocks, params).sum(0), tb.grad.numpy(), rtol=1e-10, atol=1e-12)
