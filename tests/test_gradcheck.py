"""Gradients of every op against central finite differences, in float64.

For a sample ``f`` and a fixed random cotangent ``u`` (one per float output), autograd gives
``grad_i = d<u, f(x)>/dx_i``. The oracle is a finite-difference directional derivative
``(<u, f(x + eps*v)> - <u, f(x - eps*v)>) / (2*eps)`` along v: every coordinate direction for
small inputs (so the whole gradient is checked), random directions for larger ones.
Second-order checks apply the same test to ``(x, u) -> autograd.grad(f(x), x, u, create_graph=True)``.
The samples are declared by the ops themselves, in the registry, and collected by tests/opinfo.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import minidl
from minidl.ops import elementwise, registry
import inspect
import sys

import opinfo
from opinfo import (ABSTRACT, FIRST_ORDER, NC, SAMPLES, SECOND_ORDER, STRIDED, function_classes, make_leaf,
                    sample_id, values_of)

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


# ----------------------------------------------------------------------------- the sweep
CLASSES = function_classes()

# Registry ops with no gradient-check sample of their own, and why. Every other op whose result can
# be a differentiable float tensor must declare samples (registry.op(..., samples=...)).
NEEDS_NO_SAMPLE = {
    # factories and numpy interop: new leaves, no inputs to differentiate
    "from_numpy", "tensor", "as_tensor", "empty", "full", "zeros", "ones", "empty_like", "zeros_like",
    "ones_like", "full_like", "arange", "linspace", "eye", "logspace", "scalar_tensor", "triu_indices", "tril_indices",
    # random draws
    "rand", "randn", "randint", "randperm", "normal", "rand_like", "randn_like", "randint_like", "bernoulli",
    "multinomial",
    # comparisons and predicates: bool results (or a Python bool)
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not", "isnan",
    "isinf", "isfinite", "isclose", "allclose", "equal", "any", "all", "signbit", "isposinf", "isneginf", "isreal",
    # integer results: indices and counts, and bitwise ops (integer and bool tensors only)
    "argmax", "argmin", "argsort", "nonzero", "count_nonzero", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not", "bitwise_left_shift", "bitwise_right_shift", "searchsorted", "bucketize", "isin", "argwhere",
    "nonzero_static", "unique_consecutive", "unravel_index", "gcd", "lcm",
    "linalg_matrix_rank", "geqrf",   # (no gradient in torch either)
    # float results with no gradient (of detached values, as in PyTorch)
    "histc", "unique", "histogram", "heaviside", "spherical_bessel_j0", "modified_bessel_i0", "modified_bessel_i1",
    *(f"{shift}chebyshev_polynomial_{kind}" for shift in ("", "shifted_") for kind in "tuvw"),
    "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p",
    # shapes only
    "broadcast_shapes",
    # no result: a real tensor has no imaginary part (it raises, as in PyTorch; tests/test_ops_shapes.py)
    "imag",
    # the optimizers' in-place steps: parameters updated without autograd (tests/test_optim_*.py)
    "_fused_sgd_step_", "_fused_adam_step_",
    # their multi-tensor forms and clip_grad_norm_'s, no autograd either (tests/test_optim_foreach.py)
    "_fused_sgd_steps_", "_fused_adam_steps_", "_fused_adagrad_steps_", "_foreach_norm", "_foreach_mul_",
}
# Functions whose gradient is not the derivative, by design as PyTorch's: ScatterMultiply's backward raises
# (tests/test_torch_compare_computes.py checks it); _Normal's is zero, as the noise is not followed
# (tests/test_computes_as_torch.py checks it)
NO_DERIVATIVE = {"ScatterMultiply", "_Normal"}
# ops checked by the samples of another op (op -> the op whose sample calls it as well)
SAMPLED_WITH = {"clamp_max": "clamp_min", "fmin": "fmax", "addcdiv": "addcmul"}


def test_every_function_is_recorded_by_a_sample():
    """An op cannot ship without a gradient check: each Function under minidl.ops is run by some sample."""
    recorded = set()
    for _, sample in SAMPLES:
        leaves = [make_leaf(spec, values_of(spec)) for spec in sample.inputs]
        result = sample.fn(*leaves)
        items = result if isinstance(result, (tuple, list)) else (result,)
        recorded |= _graph_node_types([r for r in items if isinstance(r, minidl.Tensor)])
    missing = sorted(name for name, cls in CLASSES.items() if cls not in recorded and name not in ABSTRACT | NO_DERIVATIVE)
    assert not missing, (f"Function subclasses that no gradcheck sample runs: {missing}. Add samples to the "
                         f"registry declaration (samples=...) of the op that uses each.")


def test_every_differentiable_op_has_samples():
    sampled = {name for name, _ in SAMPLES}
    missing = sorted(set(registry.OPS) - sampled - NEEDS_NO_SAMPLE - set(SAMPLED_WITH))
    assert not missing, (f"ops without gradcheck samples: {missing}. Declare samples=lambda t: [...] with the op "
                         f"(see tests/opinfo.py), or list it in NEEDS_NO_SAMPLE with the reason.")
    stale = sorted((NEEDS_NO_SAMPLE | set(SAMPLED_WITH)) - set(registry.OPS))
    assert not stale, f"NEEDS_NO_SAMPLE / SAMPLED_WITH name ops that are not declared: {stale}"
    assert not sampled & NEEDS_NO_SAMPLE, f"ops with samples listed in NEEDS_NO_SAMPLE: {sampled & NEEDS_NO_SAMPLE}"
    assert set(SAMPLED_WITH.values()) <= sampled


def test_abstract_functions_template_concrete_ones():
    for name in ABSTRACT:
        assert name in CLASSES and CLASSES[name].__subclasses__(), name


def test_registry_sees_known_ops():
    for name in ("Add", "MatMul", "Sum", "Take", "IndexPut", "Cat", "Permute", "CopySlices", "Softmax"):
        assert name in CLASSES


@pytest.mark.parametrize("op,sample", FIRST_ORDER, ids=[sample_id(*p) for p in FIRST_ORDER])
def test_gradcheck(op, sample):
    gradcheck(sample.fn, sample.inputs, sample.eps, sample.atol, sample.rtol)


@pytest.mark.parametrize("op,sample", STRIDED, ids=[sample_id(*p) for p in STRIDED])
def test_gradcheck_on_strided_inputs(op, sample):
    """Each sample again with column-major and negatively strided leaves (opinfo.layout_variants)."""
    gradcheck(sample.fn, sample.inputs, sample.eps, sample.atol, sample.rtol)


@pytest.mark.parametrize("op,sample", SECOND_ORDER, ids=[sample_id(*p) for p in SECOND_ORDER])
def test_gradgradcheck(op, sample):
    gradgradcheck(sample.fn, sample.inputs, sample.eps, sample.atol, sample.rtol)


def _run(sample, dtype=np.float64):
    """The sample's float outputs as float64 arrays, from leaves (and float constants) of ``dtype``."""
    opinfo.FLOAT = minidl.float32 if dtype == np.float32 else minidl.float64
    try:
        leaves = [make_leaf(spec, values_of(spec), dtype=dtype) for spec in sample.inputs]
        return [_np(out) for out in _float_outputs(sample.fn(*leaves))]
    finally:
        opinfo.FLOAT = minidl.float64


@pytest.mark.parametrize("op,sample", FIRST_ORDER, ids=[sample_id(*p) for p in FIRST_ORDER])
def test_float32_forward_matches_float64(op, sample):
    """The float32 kernels against the float64 ones on the same values (gradcheck has checked the
    float64 forward's derivatives; its values are checked against numpy and PyTorch op by op)."""
    want, got = _run(sample), _run(sample, np.float32)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        scale = max(1.0, float(np.nanmax(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5 * scale, equal_nan=True)


def _calls_and_nodes(sample):
    """The code objects a sample's run calls and the Function classes its result records."""
    called = set()

    def profile(frame, event, arg):
        if event == "call":
            called.add(frame.f_code)
    leaves = [make_leaf(spec, values_of(spec)) for spec in sample.inputs]
    sys.setprofile(profile)
    try:
        result = sample.fn(*leaves)
    finally:
        sys.setprofile(None)
    items = result if isinstance(result, (tuple, list)) else (result,)
    return called, _graph_node_types([r for r in items if isinstance(r, minidl.Tensor)])


RUN_ELSEWHERE = {("to_device", "to-cpu")}  # a copy to the CPU only when test_cuda_ops runs it on 'cuda'
# Functions sampled under an op they are not the apply of: the one-pass backwards of ReLU, SiLU and GELU (Gate,
# SiluBackward, ...), whose samples are their activation's
FUNCTIONS_SAMPLED_WITH = {"relu": {elementwise.Gate}, "_silu": {elementwise.SiluBackward},
                          "_gelu": {elementwise.GeluBackward}, "_gelu_tanh": {elementwise.GeluTanhBackward}}


def test_each_sample_exercises_its_op():
    """A sample calls its op's function, or (through an operator or a method such as ``a + b``)
    records a Function that the op's function records."""
    runs = {(op, s.name, s.second_order): _calls_and_nodes(s) for op, s in SAMPLES}
    functions_of = {op: set(functions) for op, functions in FUNCTIONS_SAMPLED_WITH.items()}
    for (op, _, _), (called, nodes) in runs.items():
        fn = inspect.unwrap(registry.OPS[op].function)
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, type) and issubclass(owner, minidl.autograd.Function):
            functions_of.setdefault(op, set()).add(owner)  # the op is a Function's apply
        elif fn.__code__ in called:
            functions_of.setdefault(op, set()).update(nodes)
    idle = [f"{op}: {name}" for (op, name, _), (called, nodes) in runs.items()
            if not nodes & functions_of.get(op, set()) and (op, name) not in RUN_ELSEWHERE
            and getattr(inspect.unwrap(registry.OPS[op].function), "__code__", None) not in called]
    assert not idle, f"samples that do not run the op they are declared with: {idle}"


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
