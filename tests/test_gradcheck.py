"""Gradients of every op against central finite differences, in float64.

For a sample ``f`` and a fixed random cotangent ``u`` (one per float output), autograd gives
``grad_i = d<u, f(x)>/dx_i``. The oracle is a finite-difference directional derivative
``(<u, f(x + eps*v)> - <u, f(x - eps*v)>) / (2*eps)`` along v: every coordinate direction for
small inputs (so the whole gradient is checked), random directions for larger ones.
Second-order checks apply the same test to ``(x, u) -> autograd.grad(f(x), x, u, create_graph=True)``.
"""
from __future__ import annotations

import numpy as np
import pytest

import minidl
from opinfo import ABSTRACT, COMPOSITES, GRADGRAD, OPS, NC, function_classes, make_leaf, values_of

MAX_COORDS = 24  # inputs up to this many elements get a full coordinate-wise check


def _float_outputs(result):
    items = result if isinstance(result, (tuple, list)) else (result,)
    return [r for r in items if isinstance(r, minidl.Tensor) and r.dtype.is_floating_point]


def _np(t):
    return np.array(t.detach().numpy(), dtype=np.float64)


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-4, seed=0):
    """Check autograd's vector-Jacobian products of ``fn`` against finite differences.

    ``inputs`` are arrays (or :class:`NC` specs for non-contiguous leaves); all are differentiated.
    Returns the float outputs of the analytic evaluation (for further inspection).
    """
    rng = np.random.default_rng(seed)
    base = [values_of(spec) for spec in inputs]
    leaves = [make_leaf(spec, v) for spec, v in zip(inputs, base)]
    outs = _float_outputs(fn(*leaves))
    assert outs, "sample has no floating-point output"
    us = [rng.standard_normal(o.shape) for o in outs]
    live = [(o, u) for o, u in zip(outs, us) if o.requires_grad]
    analytic = [np.zeros(v.shape) for v in base]
    if live:
        grads = minidl.autograd.grad([o for o, _ in live], leaves,
                                     [minidl.tensor(u, dtype=o.dtype) for o, u in live], allow_unused=True)
        for i, g in enumerate(grads):
            if g is not None:
                assert tuple(g.shape) == base[i].shape, f"grad {i} has shape {tuple(g.shape)}"
                assert g.dtype is minidl.float64, f"grad {i} has dtype {g.dtype}"
                analytic[i] = _np(g)

    def phi(values):
        res = _float_outputs(fn(*[make_leaf(spec, v) for spec, v in zip(inputs, values)]))
        return sum(float(np.sum(u * _np(o))) for u, o in zip(us, res))

    for i, v in enumerate(base):
        if v.size <= MAX_COORDS:
            directions = [d.reshape(v.shape) for d in np.eye(v.size)]
        else:
            directions = [rng.standard_normal(v.shape) for _ in range(3)]
        numeric, expected = [], []
        for d in directions:
            plus, minus = list(base), list(base)
            plus[i], minus[i] = v + eps * d, v - eps * d
            numeric.append((phi(plus) - phi(minus)) / (2 * eps))
            expected.append(float(np.sum(analytic[i] * d)))
        np.testing.assert_allclose(expected, numeric, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i} (autograd) vs finite differences")
    return outs


def gradgradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-4, seed=1):
    """gradcheck of (x..., u...) -> autograd.grad(fn(x), x, u, create_graph=True)."""
    n = len(inputs)
    probe = _float_outputs(fn(*[make_leaf(s, values_of(s)) for s in inputs]))
    rng = np.random.default_rng(seed)
    us = [rng.standard_normal(o.shape) for o in probe if o.requires_grad]

    def first_grads(*args):
        xs, gs = args[:n], args[n:]
        outs = [o for o in _float_outputs(fn(*xs)) if o.requires_grad]
        grads = minidl.autograd.grad(outs, xs, list(gs), create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    gradcheck(first_grads, list(inputs) + us, eps=eps, atol=atol, rtol=rtol, seed=seed)


def _graph_node_types(outputs):
    seen, stack, types = set(), [o.grad_fn for o in outputs if o.grad_fn is not None], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        types.add(type(node))
        stack.extend(e[0] for e in node.next_functions if e is not None)
    return types


# ----------------------------------------------------------------------------- the registry
CLASSES = function_classes()


def test_every_function_has_a_gradcheck_entry():
    missing = sorted(set(CLASSES) - set(OPS) - ABSTRACT)
    assert not missing, (f"Function subclasses without a gradcheck sample in tests/opinfo.py OPS: {missing}. "
                         f"Add one (or more) samples for each new op.")


def test_no_stale_entries():
    stale = sorted(set(OPS) - set(CLASSES))
    assert not stale, f"opinfo.OPS names ops that no longer exist: {stale}"
    for name in ABSTRACT:
        assert name in CLASSES and CLASSES[name].__subclasses__(), name
        assert name not in OPS


def test_registry_sees_known_ops():
    for name in ("Add", "MatMul", "Sum", "Take", "IndexPut", "Cat", "Permute", "CopySlices", "Softmax"):
        assert name in CLASSES


@pytest.mark.parametrize("name,sample", [(n, s) for n, ss in sorted(OPS.items()) for s in ss],
                         ids=lambda v: v if isinstance(v, str) else repr(v))
def test_gradcheck_op(name, sample):
    outs = gradcheck(sample.fn, sample.inputs, sample.eps, sample.atol, sample.rtol)
    # the sample must really run the op it is listed under
    assert CLASSES[name] in _graph_node_types(outs), f"sample {sample.name} does not record a {name} node"


@pytest.mark.parametrize("sample", COMPOSITES, ids=repr)
def test_gradcheck_composite(sample):
    gradcheck(sample.fn, sample.inputs, sample.eps, sample.atol, sample.rtol)


@pytest.mark.parametrize("sample", GRADGRAD, ids=repr)
def test_gradgradcheck(sample):
    gradgradcheck(sample.fn, sample.inputs, sample.eps, sample.atol, sample.rtol)


# ----------------------------------------------------------------------------- the checker itself
def test_gradcheck_catches_a_wrong_gradient():
    class Wrong(minidl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x  # should be 2 * g * x

    with pytest.raises(AssertionError):
        gradcheck(Wrong.apply, [np.array([1.0, 2.0, -0.5])])


def test_gradgradcheck_catches_a_wrong_second_derivative():
    class Detached(minidl.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.exp()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.detach().exp()  # right value, but not differentiable

    gradcheck(Detached.apply, [np.array([0.3, -0.7])])
    with pytest.raises(AssertionError):
        gradgradcheck(Detached.apply, [np.array([0.3, -0.7])])


def test_noncontiguous_specs_build_noncontiguous_leaves():
    for kind in ("F", "gap", "neg"):
        v = np.arange(12.0).reshape(3, 4)
        t = make_leaf(NC(v, kind), v)
        assert t.is_leaf and t.requires_grad and not t.is_contiguous()
        np.testing.assert_array_equal(_np(t), v)
