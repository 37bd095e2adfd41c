"""The autograd engine and its user-facing API: accumulation, graph retention, grad modes,
hooks, version counters, in-place on views, higher-order gradients, custom Functions and
user-registered kernels. Expected values are closed forms computed here with numpy."""
from __future__ import annotations

import math
import sys

import numba
import numpy as np
import pytest

import minidl
from minidl.autograd import Function


def f64(values, requires_grad=False):
    return minidl.tensor(np.asarray(values, dtype=np.float64), dtype=minidl.float64, requires_grad=requires_grad)


def npy(t):
    return np.array(t.detach().numpy())


@pytest.fixture
def x():
    return f64([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], requires_grad=True)


# ----------------------------------------------------------------------------- basics
def test_gradient_accumulates_across_backward_calls(x):
    (x * x).sum().backward()
    first = npy(x.grad)
    np.testing.assert_allclose(first, 2 * npy(x))
    (x * 3).sum().backward()
    np.testing.assert_allclose(npy(x.grad), 2 * npy(x) + 3)
    x.grad = None
    x.sum().backward()
    np.testing.assert_allclose(npy(x.grad), np.ones((2, 3)))
    x.grad.zero_()
    x.sum().backward()
    np.testing.assert_allclose(npy(x.grad), np.ones((2, 3)))


def test_second_backward_needs_retain_graph(x):
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_retain_graph_allows_a_second_backward(x):
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    xv = npy(x)
    np.testing.assert_allclose(npy(x.grad), 2 * (np.exp(xv) * (xv + 1)))
    z = (x * x).sum()
    g1, = minidl.autograd.grad(z, x, retain_graph=True)
    g2, = minidl.autograd.grad(z, x)
    np.testing.assert_allclose(npy(g1), npy(g2))
    with pytest.raises(RuntimeError, match="second time"):
        minidl.autograd.grad(z, x)


def test_backward_on_non_scalar_needs_gradient(x):
    y = x * 2
    with pytest.raises(RuntimeError, match="scalar outputs"):
        y.backward()
    y.backward(f64(np.full((2, 3), 0.5)))
    np.testing.assert_allclose(npy(x.grad), np.ones((2, 3)))


def test_backward_gradient_of_wrong_shape(x):
    with pytest.raises(RuntimeError, match="shape"):
        (x * 2).backward(f64(np.ones(3)))


def test_backward_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        f64([1.0, 2.0]).sum().backward()


def test_long_chain_is_iterative():
    x = f64([1.0, 2.0], requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # the engine must not recurse along the chain
    try:
        y.sum().backward()
    finally:
        sys.setrecursionlimit(limit)
    np.testing.assert_allclose(npy(x.grad), np.full(2, 1.0001 ** 10_000), rtol=1e-9)


def test_backward_with_inputs_only_accumulates_those():
    a, b = f64([1.0, 2.0], True), f64([3.0, 4.0], True)
    (a * b).sum().backward(inputs=[a])
    np.testing.assert_allclose(npy(a.grad), [3.0, 4.0])
    assert b.grad is None


def test_diamond_graph_sums_paths():
    x = f64([0.3, -0.4], True)
    y = x.exp()
    z = y * y + y.sin() + y  # y reached along three paths
    z.sum().backward()
    ev = np.exp(npy(x))
    np.testing.assert_allclose(npy(x.grad), (2 * ev + np.cos(ev) + 1) * ev)


# ----------------------------------------------------------------------------- grad modes
def test_no_grad_context_and_decorator(x):
    with minidl.no_grad():
        y = x * 2
        assert not minidl.is_grad_enabled()
    assert minidl.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None

    @minidl.no_grad()
    def f(t):
        assert not minidl.is_grad_enabled()
        return t * 2

    assert not f(x).requires_grad
    assert minidl.is_grad_enabled()
    assert f.__name__ == "f"


def test_enable_grad_inside_no_grad(x):
    with minidl.no_grad():
        with minidl.enable_grad():
            y = x * 2
        z = x * 2
    assert y.requires_grad and not z.requires_grad

    @minidl.enable_grad()
    def f(t):
        return t * 2

    with minidl.no_grad():
        assert f(x).requires_grad
        assert not minidl.is_grad_enabled()


def test_set_grad_enabled_function_context_and_decorator(x):
    with minidl.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert minidl.is_grad_enabled()
    with minidl.set_grad_enabled(True):
        assert (x * 2).requires_grad
    minidl.set_grad_enabled(False)  # a plain call takes effect immediately
    try:
        assert not minidl.is_grad_enabled()
        assert not (x * 2).requires_grad
    finally:
        minidl.set_grad_enabled(True)
    assert minidl.is_grad_enabled()

    @minidl.set_grad_enabled(False)
    def f(t):
        return t * 2

    assert minidl.is_grad_enabled()  # decorating must not switch grad off
    assert not f(x).requires_grad
    assert minidl.is_grad_enabled()


def test_grad_mode_restored_after_exception(x):
    with pytest.raises(ValueError):
        with minidl.no_grad():
            raise ValueError
    assert minidl.is_grad_enabled()


def test_inference_mode(x):
    assert not minidl.autograd.is_inference_mode_enabled()
    with minidl.inference_mode():
        assert minidl.autograd.is_inference_mode_enabled() and not minidl.is_grad_enabled()
        y = (x * 2).exp()
        assert not y.requires_grad
    assert not minidl.autograd.is_inference_mode_enabled() and minidl.is_grad_enabled()
    with minidl.inference_mode(False):
        assert (x * 2).requires_grad

    @minidl.inference_mode()
    def f(t):
        return t + 1

    assert not f(x).requires_grad
    assert minidl.is_grad_enabled()


# ----------------------------------------------------------------------------- tensor flags
def test_detach_shares_memory_and_cuts_the_graph(x):
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    with minidl.no_grad():
        d[0, 0] = 100.0
    assert y[0, 0].item() == 100.0  # same storage
    z = (d * x).sum()
    z.backward()
    np.testing.assert_allclose(npy(x.grad), npy(d))


def test_requires_grad_flags(x):
    a = f64([1.0, 2.0])
    assert not a.requires_grad and a.is_leaf
    assert a.requires_grad_() is a and a.requires_grad
    a.requires_grad_(False)
    assert not a.requires_grad
    y = x * 2
    assert y.requires_grad and not y.is_leaf and x.is_leaf
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)
    with pytest.raises(RuntimeError, match="floating point"):
        minidl.tensor([1, 2]).requires_grad_()
    assert minidl.ones(2, requires_grad=True).requires_grad


def test_int_results_do_not_require_grad(x):
    assert not (x > 0).requires_grad
    assert not x.argmax().requires_grad
    values, indices = x.max(1)
    assert values.requires_grad and not indices.requires_grad


def test_retain_grad(x):
    y = x * 2
    z = y * y
    y.retain_grad()
    assert y.retains_grad and not z.retains_grad
    z.sum().backward()
    np.testing.assert_allclose(npy(y.grad), 2 * npy(y))
    assert z.grad is None  # not retained
    np.testing.assert_allclose(npy(x.grad), 8 * npy(x))
    x.retain_grad()  # no-op on a leaf
    with pytest.raises(RuntimeError):
        f64([1.0]).retain_grad()


def test_grad_fn_names_and_next_functions():
    a, b = f64([1.0, 2.0], True), f64([3.0, 4.0], True)
    c = a * b
    assert c.grad_fn.name() == "MulBackward0"
    assert "MulBackward0" in repr(c.grad_fn)
    (na, ia), (nb, ib) = c.grad_fn.next_functions
    assert na.name() == nb.name() == "AccumulateGrad" and ia == ib == 0
    assert na.variable is a and nb.variable is b
    d = (c + 1).exp().sum()
    assert d.grad_fn.name() == "SumBackward0"
    assert d.grad_fn.next_functions[0][0].name() == "ExpBackward0"
    assert d.grad_fn.next_functions[0][0].next_functions[0][0].name() == "AddBackward0"
    e = a * 2  # a constant operand has no edge
    assert e.grad_fn.next_functions[1] is None
    assert a.grad_fn is None
    assert (a @ b).grad_fn is not None


# ----------------------------------------------------------------------------- hooks
def test_hook_on_leaf_replaces_gradient(x):
    seen = []
    h = x.register_hook(lambda g: g * 2)
    x.register_hook(lambda g: seen.append(npy(g)))  # observer: returns None
    (x * 3).sum().backward()
    np.testing.assert_allclose(npy(x.grad), np.full((2, 3), 6.0))
    np.testing.assert_allclose(seen[0], np.full((2, 3), 6.0))  # hooks run in order
    h.remove()
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(npy(x.grad), np.full((2, 3), 3.0))


def test_hook_on_non_leaf(x):
    y = x * 2
    seen = []

    def hook(g):
        seen.append(npy(g))
        return g + 1

    h = y.register_hook(hook)
    (y * y).sum().backward()
    np.testing.assert_allclose(seen[0], 2 * npy(y))
    np.testing.assert_allclose(npy(x.grad), 2 * (2 * npy(y) + 1))
    h.remove()
    x.grad = None
    y2 = x * 2
    (y2 * y2).sum().backward()
    np.testing.assert_allclose(npy(x.grad), 8 * npy(x))
    with pytest.raises(RuntimeError, match="doesn't require"):
        f64([1.0]).register_hook(lambda g: g)


def test_hook_sees_the_summed_gradient_of_several_uses(x):
    y = x * 1
    seen = []
    y.register_hook(lambda g: seen.append(npy(g)))
    (y * 2 + y * 3).sum().backward()
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], np.full((2, 3), 5.0))


def test_hooks_apply_in_autograd_grad(x):
    x.register_hook(lambda g: g * 10)
    g, = minidl.autograd.grad((x * 2).sum(), x)
    np.testing.assert_allclose(npy(g), np.full((2, 3), 20.0))


def test_post_accumulate_grad_hook(x):
    calls = []

    def hook(t):
        assert t is x
        calls.append(npy(t.grad))

    handle = x.register_post_accumulate_grad_hook(hook)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(calls[0], np.full((2, 3), 2.0))  # .grad already updated
    np.testing.assert_allclose(calls[1], np.full((2, 3), 5.0))
    handle.remove()
    x.sum().backward()
    assert len(calls) == 2
    with pytest.raises(RuntimeError, match="non-leaf"):
        (x * 2).register_post_accumulate_grad_hook(hook)


def test_post_accumulate_hook_can_update_the_leaf_like_an_optimizer():
    w = f64([1.0, 2.0], True)

    def sgd_step(p):
        with minidl.no_grad():
            p.sub_(p.grad * 0.5)
        p.grad = None

    w.register_post_accumulate_grad_hook(sgd_step)
    (w * w).sum().backward()
    np.testing.assert_allclose(npy(w), [0.0, 0.0])
    assert w.grad is None


# ----------------------------------------------------------------------------- in-place and versions
def test_modifying_a_saved_output_raises(x):
    y = x.exp()
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_modifying_a_saved_input_raises(x):
    b = x * 2
    c = b * b
    b.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


def test_modifying_a_saved_tensor_through_a_view_raises(x):
    b = x * 2
    c = b.sin()
    b[0].mul_(3)  # same storage, so the version counter is shared
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


def test_version_counter_is_shared_by_views_and_detach(x):
    b = x.detach()
    v = b[1]
    before = x._version
    v.add_(1)  # in-place on a detached tensor is allowed, even in grad mode (x.data.add_ too)
    assert x._version == b._version == v._version == before + 1
    x.data.mul_(2)
    assert x._version == before + 2 and x.is_leaf and x.requires_grad


def test_inplace_on_unsaved_tensor_is_fine(x):
    b = x * 2  # saves x and a constant, not b
    b.add_(1)
    b.mul_(3)  # Mul saves its input b, which it overwrites: backward must see the original
    b.sum().backward()
    np.testing.assert_allclose(npy(x.grad), np.full((2, 3), 6.0))


def test_inplace_arithmetic_on_non_leaf_with_grad_operands(x):
    w = f64([1.0, -2.0, 0.5], True)
    y = x * 1
    y.mul_(w)
    y.add_(w)
    y.div_(2.0)
    y.sum().backward()
    xv, wv = npy(x), npy(w)
    np.testing.assert_allclose(npy(x.grad), np.broadcast_to(wv / 2, (2, 3)))
    np.testing.assert_allclose(npy(w.grad), (xv.sum(0) + 2) / 2)


def test_inplace_on_leaf_requiring_grad_raises(x):
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.exp_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x[0] = 1.0
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x[:, 1].mul_(2)
    with minidl.no_grad():  # allowed without a graph (what optimizers do)
        x.mul_(2)
    assert x.is_leaf and x.requires_grad


def test_inplace_on_view_of_non_leaf(x):
    w = f64([2.0, -1.0], True)
    y = x * 1
    col = y[:, 1]
    col.mul_(w)
    assert y.grad_fn.name() == "CopySlicesBackward0"
    loss = (y * y).sum()
    loss.backward()
    xv, wv = npy(x), npy(w)
    yv = xv.copy()
    yv[:, 1] *= wv
    expected = 2 * yv
    expected[:, 1] *= wv
    np.testing.assert_allclose(npy(x.grad), expected)
    np.testing.assert_allclose(npy(w.grad), 2 * yv[:, 1] * xv[:, 1])


def test_inplace_unary_on_view_of_view(x):
    y = x * 2
    y.t()[1].exp_()  # row 1 of y.t() is column 1 of y
    y.sum().backward()
    expected = np.full((2, 3), 2.0)
    expected[:, 1] = 2 * np.exp(2 * npy(x)[:, 1])
    np.testing.assert_allclose(npy(x.grad), expected)


def test_setitem_on_non_leaf(x):
    v = f64([10.0, 20.0], True)
    y = x.clone()
    y[:, 0] = v
    y[1, 2] = 0.0
    (y * y).sum().backward()
    xv = npy(x)
    expected = 2 * xv
    expected[:, 0] = 0
    expected[1, 2] = 0
    np.testing.assert_allclose(npy(x.grad), expected)
    np.testing.assert_allclose(npy(v.grad), [20.0, 40.0])


def test_old_view_sees_base_changes_and_gradient(x):
    y = x * 1
    row = y[0]
    y.mul_(3)
    np.testing.assert_allclose(npy(row), 3 * npy(x)[0])
    (y * 1).sum().backward()
    np.testing.assert_allclose(npy(x.grad), np.full((2, 3), 3.0))


# ----------------------------------------------------------------------------- autograd.grad and higher order
def test_second_derivative_of_cube():
    x = f64([-1.5, 0.5, 2.0], True)
    y = (x ** 3).sum()
    g, = minidl.autograd.grad(y, x, create_graph=True)
    assert g.requires_grad
    np.testing.assert_allclose(npy(g), 3 * npy(x) ** 2)
    gg, = minidl.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(npy(gg), 6 * npy(x))


def test_third_derivative_via_backward_create_graph():
    x = f64([0.7], True)
    y = x.sin()
    g1, = minidl.autograd.grad(y.sum(), x, create_graph=True)
    g2, = minidl.autograd.grad(g1.sum(), x, create_graph=True)
    g3, = minidl.autograd.grad(g2.sum(), x)
    np.testing.assert_allclose(npy(g3), [-math.cos(0.7)])


def test_backward_create_graph_makes_grad_differentiable():
    x = f64([1.0, 2.0], True)
    (x ** 2).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    grad = x.grad
    x.grad = None
    grad.sum().backward()
    np.testing.assert_allclose(npy(x.grad), [2.0, 2.0])


def test_hessian_vector_product():
    rng = np.random.default_rng(3)
    a_np, x_np, v_np = rng.standard_normal((4, 4)), rng.standard_normal(4), rng.standard_normal(4)
    a, x, v = f64(a_np), f64(x_np, True), f64(v_np)
    f = x @ a @ x + (x ** 3).sum()
    g, = minidl.autograd.grad(f, x, create_graph=True)
    np.testing.assert_allclose(npy(g), (a_np + a_np.T) @ x_np + 3 * x_np ** 2)
    hv, = minidl.autograd.grad(g, x, grad_outputs=v)
    np.testing.assert_allclose(npy(hv), (a_np + a_np.T + np.diag(6 * x_np)) @ v_np)


def test_grad_with_grad_outputs_and_several_inputs():
    a, b = f64([1.0, 2.0, 3.0], True), f64([0.5, -1.0, 2.0], True)
    y = a * b
    ga, gb = minidl.autograd.grad([y], [a, b], grad_outputs=[f64([1.0, 10.0, 100.0])])
    np.testing.assert_allclose(npy(ga), [0.5, -10.0, 200.0])
    np.testing.assert_allclose(npy(gb), [1.0, 20.0, 300.0])
    assert a.grad is None and b.grad is None  # grad() does not accumulate


def test_grad_of_several_outputs():
    x = f64([1.0, 2.0], True)
    g, = minidl.autograd.grad([(x * x).sum(), (x * 3).sum()], x)
    np.testing.assert_allclose(npy(g), 2 * npy(x) + 3)


def test_grad_wrt_non_leaf():
    x = f64([1.0, 2.0], True)
    y = x * 3
    z = (y * y).sum()
    gy, = minidl.autograd.grad(z, y)
    np.testing.assert_allclose(npy(gy), 2 * npy(y))


def test_allow_unused():
    x, z = f64([1.0, 2.0], True), f64([3.0], True)
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="allow_unused"):
        minidl.autograd.grad(y, [x, z], retain_graph=True)
    gx, gz = minidl.autograd.grad(y, [x, z], retain_graph=True, allow_unused=True)
    np.testing.assert_allclose(npy(gx), [2.0, 2.0])
    assert gz is None
    gx, gz = minidl.autograd.grad(y, [x, z], allow_unused=True, materialize_grads=True)
    np.testing.assert_allclose(npy(gz), [0.0])


def test_grad_wrt_tensor_not_requiring_grad_raises():
    x = f64([1.0], True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        minidl.autograd.grad((x * 2).sum(), f64([1.0]))


# ----------------------------------------------------------------------------- broadcasting
def test_broadcast_gradients_sum_back_to_input_shapes():
    a = f64(np.arange(3.0).reshape(3, 1), True)
    b = f64([1.0, 2.0, 3.0, 4.0], True)
    c = f64(2.0, True)  # 0-d
    (a * b + c).sum().backward()
    assert a.grad.shape == (3, 1) and b.grad.shape == (4,) and c.grad.shape == ()
    np.testing.assert_allclose(npy(a.grad), np.full((3, 1), 10.0))
    np.testing.assert_allclose(npy(b.grad), np.full(4, 3.0))
    np.testing.assert_allclose(npy(c.grad), 12.0)


def test_broadcast_gradient_through_where_and_matmul():
    m = f64(np.ones((2, 1, 1, 3)), True)
    w = f64(np.arange(12.0).reshape(4, 3, 1) / 10, True)
    out = m @ w  # batch (2,1) with (4,) -> (2, 4)
    assert out.shape == (2, 4, 1, 1)
    out.sum().backward()
    np.testing.assert_allclose(npy(m.grad), np.broadcast_to(npy(w).sum(0).reshape(1, 1, 1, 3), (2, 1, 1, 3)))
    np.testing.assert_allclose(npy(w.grad), np.full((4, 3, 1), 2.0))
    a, b = f64([1.0, 2.0, 3.0], True), f64([[5.0], [6.0]], True)
    minidl.where(f64([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]) > 0, a, b).sum().backward()
    np.testing.assert_allclose(npy(a.grad), [1.0, 0.0, 2.0])
    np.testing.assert_allclose(npy(b.grad), [[1.0], [2.0]])


def test_expand_gradient_sums(x):
    row = f64([1.0, 2.0, 3.0], True)
    (row.expand(4, 3) * f64(np.arange(12.0).reshape(4, 3))).sum().backward()
    np.testing.assert_allclose(npy(row.grad), np.arange(12.0).reshape(4, 3).sum(0))


# ----------------------------------------------------------------------------- custom Functions
class ScaledMul(Function):
    """a * b * k, for a python number k; records what backward was asked for."""
    calls = []

    @staticmethod
    def forward(ctx, a, b, k):
        ctx.save_for_backward(a, b)
        ctx.k = k
        return a * b * k

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ScaledMul.calls.append(ctx.needs_input_grad)
        ga = g * b * ctx.k if ctx.needs_input_grad[0] else None
        gb = g * a * ctx.k if ctx.needs_input_grad[1] else None
        return ga, gb, None


def test_custom_function():
    ScaledMul.calls.clear()
    a, b = f64([1.0, 2.0], True), f64([3.0, 4.0])
    y = ScaledMul.apply(a, b, 2.0)
    assert y.requires_grad and y.grad_fn.name() == "ScaledMulBackward0"
    assert isinstance(y.grad_fn, ScaledMul)
    y.sum().backward()
    assert ScaledMul.calls == [(True, False, False)]
    np.testing.assert_allclose(npy(a.grad), [6.0, 8.0])
    b.requires_grad_()
    ScaledMul.apply(a, b, 1.0).sum().backward()
    assert ScaledMul.calls[-1] == (True, True, False)
    np.testing.assert_allclose(npy(b.grad), [1.0, 2.0])


def test_custom_function_without_grad_inputs_records_nothing():
    y = ScaledMul.apply(f64([1.0]), f64([2.0]), 3.0)
    assert not y.requires_grad and y.grad_fn is None
    with minidl.no_grad():
        y = ScaledMul.apply(f64([1.0], True), f64([2.0]), 3.0)
    assert not y.requires_grad


def test_custom_function_double_backward():
    a = f64([1.5, -2.0], True)
    y = ScaledMul.apply(a, a, 1.0)  # a^2 via both inputs
    g, = minidl.autograd.grad(y.sum(), a, create_graph=True)
    np.testing.assert_allclose(npy(g), 2 * npy(a))
    gg, = minidl.autograd.grad(g.sum(), a)
    np.testing.assert_allclose(npy(gg), [2.0, 2.0])


class SortLike(Function):
    """Returns (max, argmax as float); the second output is marked non-differentiable."""

    @staticmethod
    def forward(ctx, x):
        idx = x.argmax()
        ctx.save_for_backward(idx)
        ctx.n = x.shape[0]
        pos = idx.to(minidl.float64)
        ctx.mark_non_differentiable(pos)
        return x[idx], pos

    @staticmethod
    def backward(ctx, g, g_pos):
        (idx,) = ctx.saved_tensors
        out = minidl.zeros(ctx.n, dtype=minidl.float64)
        return out.index_add(0, idx.reshape(1), g.reshape(1))


def test_mark_non_differentiable():
    x = f64([1.0, 5.0, 2.0], True)
    value, pos = SortLike.apply(x)
    assert value.requires_grad and not pos.requires_grad
    assert pos.item() == 1.0
    (value * 3).backward()
    np.testing.assert_allclose(npy(x.grad), [0.0, 3.0, 0.0])


class Identity(Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2  # deliberately not the identity, to see this node ran


def test_custom_function_returning_its_input():
    x = f64([1.0, 2.0], True)
    y = Identity.apply(x)
    assert y is not x and y.grad_fn is not None and x.grad_fn is None
    y.sum().backward()
    np.testing.assert_allclose(npy(x.grad), [2.0, 2.0])


def test_custom_function_wrong_number_of_gradients():
    class Bad(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g, g, g

    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        Bad.apply(f64([1.0], True), f64([1.0], True)).sum().backward()


def test_custom_function_wrong_gradient_shape():
    class Bad(Function):
        @staticmethod
        def forward(ctx, a):
            return a.sum()

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(RuntimeError, match="invalid gradient"):
        Bad.apply(f64([1.0, 2.0], True)).backward()


# ----------------------------------------------------------------------------- user kernels
@minidl.kernels.register("swish_fwd", "cpu")
@numba.njit(cache=False)
def _swish_fwd_cpu(x, out):
    """out = x * sigmoid(x) on contiguous 1-D float buffers."""
    for i in range(x.size):
        out[i] = x[i] / (1.0 + math.exp(-x[i]))


class Swish(Function):
    @staticmethod
    def forward(ctx, x):
        xc = x.contiguous()
        out = minidl.empty_like(xc)
        kernel = minidl.kernels.get("swish_fwd", x.device.type)
        kernel(xc.detach().numpy().reshape(-1), out.numpy().reshape(-1))
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = x.sigmoid()
        return g * (s + x * s * (1 - s))


def test_user_registered_kernel_in_custom_function():
    assert "swish_fwd" in minidl.kernels.registered("cpu")
    assert minidl.kernels.get("swish_fwd", "cpu") is _swish_fwd_cpu
    xv = np.array([[-2.0, -0.5, 0.0], [0.5, 1.0, 3.0]])
    x = f64(xv, True)
    y = Swish.apply(x.t())  # non-contiguous input: the Function packs it for the kernel
    sig = 1 / (1 + np.exp(-xv.T))
    np.testing.assert_allclose(npy(y), xv.T * sig)
    y.sum().backward()
    np.testing.assert_allclose(npy(x.grad), (sig + xv.T * sig * (1 - sig)).T)
    with pytest.raises(RuntimeError, match="no 'swish_fwd' kernel"):
        minidl.kernels.get("swish_fwd", "nodevice")


def test_replacing_a_builtin_kernel_is_visible_to_ops():
    original = minidl.kernels.get("matmul", "cpu")
    calls = []

    def spy(*args):
        calls.append(1)
        return original(*args)

    minidl.kernels.register("matmul", "cpu")(spy)
    try:
        out = f64([[1.0, 2.0]]) @ f64([[3.0], [4.0]])
    finally:
        minidl.kernels.register("matmul", "cpu")(original)
    assert calls and out.item() == 11.0
    assert minidl.kernels.get("matmul", "cpu") is original


# -- regressions from review: views, capture, hooks, mark_dirty (expected values derived by hand) --
def test_writing_through_one_view_updates_the_history_of_other_views():
    x = minidl.arange(6.0, requires_grad=True)
    h = (x * 1).reshape(2, 3)
    h[0] = 0                      # the first row no longer depends on x
    h.sum().backward()
    assert x.grad.tolist() == [0, 0, 0, 1, 1, 1]

    x = minidl.arange(3.0, requires_grad=True)
    y = x * 1
    v = y[:2]
    y.mul_(3)                     # v sees the new values: v = 3 * x[:2]
    v.sum().backward()
    assert x.grad.tolist() == [3, 3, 0]


def test_grad_with_respect_to_a_non_leaf_leaves_its_history_usable():
    w = minidl.tensor([1.0, 2.0], requires_grad=True)
    x = w.exp()
    (g,) = minidl.autograd.grad((x * 2).sum(), x)
    assert g.tolist() == [2, 2]
    x.sum().backward()            # x's own node must not have been run and freed
    assert np.allclose(w.grad.numpy(), np.exp([1.0, 2.0]))


def test_backward_with_inputs_runs_leaf_hooks_once():
    w = minidl.tensor([1.0, 2.0], requires_grad=True)
    w.register_hook(lambda g: g * 10)
    (w * 1).sum().backward(inputs=[w])
    assert w.grad.tolist() == [10, 10]


def test_retain_grad_stores_the_gradient_after_later_hooks():
    w = minidl.tensor([1.0, 2.0], requires_grad=True)
    y = w * 2
    y.retain_grad()
    y.register_hook(lambda g: g * 3)
    y.sum().backward()
    assert y.grad.tolist() == [3, 3]
    assert w.grad.tolist() == [6, 6]


def test_mark_dirty_rebases_the_input_onto_the_custom_function():
    class SquareInPlace(minidl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mark_dirty(x)
            ctx.save_for_backward(x.clone())
            return x.mul_(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2 * x

    w = minidl.tensor([2.0, 4.0], requires_grad=True)
    y = w * 1
    z = SquareInPlace.apply(y)
    assert z is y and y.tolist() == [4, 16]
    (z * z).sum().backward()      # d(w^4)/dw = 4 w^3
    assert w.grad.tolist() == [32, 256]


# -- AccumulateGrad keeps a gradient buffer nobody else can see, and copies every other one ----------
def _grad_is_private(leaf, *others):
    """Writing into leaf.grad must not change any other tensor (no hidden aliasing)."""
    before = [o.detach().numpy().copy() for o in others]
    leaf.grad.add_(1000.0)
    return all(np.array_equal(b, o.detach().numpy()) for b, o in zip(before, others))


def test_fresh_gradient_is_kept_without_a_copy():
    made = []

    class Double(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            out = g * 2.0
            made.append(out.data_ptr())   # the address only: no reference is kept
            return out

    w = minidl.randn(8, 4, requires_grad=True)
    Double.apply(w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2.0)
    assert w.grad.data_ptr() == made[0]


def test_gradient_shared_with_a_retained_grad_is_copied():
    x = minidl.randn(5, requires_grad=True)
    y = x.clone()              # Clone's backward hands its incoming gradient straight through
    y.retain_grad()
    (y * 3.0).sum().backward()
    assert _grad_is_private(x, y.grad)


def test_gradient_saved_by_a_hook_is_copied():
    x = minidl.randn(5, requires_grad=True)
    kept = []
    x.register_hook(lambda g: kept.append(g))
    (x * 2.0).sum().backward()
    assert _grad_is_private(x, kept[0])


def test_user_supplied_gradient_is_copied():
    x = minidl.randn(5, requires_grad=True)
    upstream = minidl.ones(5)
    x.clone().backward(upstream)
    assert _grad_is_private(x, upstream)


def test_one_gradient_reaching_two_leaves_is_not_shared():
    a = minidl.randn(5, requires_grad=True)
    b = minidl.randn(5, requires_grad=True)
    (a + b).backward(minidl.randn(5) * 1.0)
    assert _grad_is_private(a, b.grad) and _grad_is_private(b, a.grad)


def test_gradient_that_is_a_view_is_copied():
    x = minidl.randn(4, requires_grad=True)
    y = minidl.randn(4, requires_grad=True)
    z = minidl.cat([x, y]) * 2.0            # the cat backward gives each input a view of one buffer
    z.sum().backward()
    assert _grad_is_private(x, y.grad)
    np.testing.assert_allclose(x.grad.numpy(), 1002.0)


def test_linear_layer_gradients_need_no_copies(monkeypatch):
    """The weight's gradient arrives through a transpose view and the bias's through a reduction:
    both are buffers only autograd holds, so backward copies nothing into .grad."""
    from minidl import kernels
    layer = minidl.nn.Linear(6, 4)
    x = minidl.randn(3, 6)
    loss = layer(x).sum()
    copies = []
    copy = kernels.get("copy", "cpu")
    monkeypatch.setitem(kernels._registry, ("cpu", "copy"), lambda *a: copies.append(a) or copy(*a))
    loss.backward()
    assert copies == []
    np.testing.assert_allclose(layer.weight.grad.numpy(), np.tile(x.numpy().sum(0), (4, 1)), rtol=1e-5)
    np.testing.assert_allclose(layer.bias.grad.numpy(), 3.0)


def test_queued_callback_runs_once_after_every_hook():
    w = minidl.ones(3, requires_grad=True)
    events = []

    def hook(leaf):
        events.append("hook")
        if len(events) == 1:
            minidl.autograd.queue_callback(lambda: events.append(("done", leaf.grad.tolist())))
    w.register_post_accumulate_grad_hook(hook)
    (w * 2).sum().backward()
    assert events == ["hook", ("done", [2.0, 2.0, 2.0])]
    (w * 2).sum().backward()  # a new pass queues anew: the first one's callback is not run again
    assert events[2:] == ["hook"]


def test_queue_callback_outside_backward_is_refused():
    with pytest.raises(RuntimeError, match="no backward pass is running"):
        minidl.autograd.queue_callback(lambda: None)
