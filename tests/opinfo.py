"""The toolkit of the op test sweep, and the sweep's samples, collected from the op registry.

Every public op declares its own gradient-check samples beside its code, in its registry
declaration (``minidl.ops.registry.op(..., samples=lambda t: [...])``). ``samples`` is a callable
that only the tests call, with this module as its toolkit ``t``: the input makers (``t.rn``,
``t.pos``, ``t.nonzero``, ``t.distinct``, ``t.frac``, ``t.avoid``, ``t.uniform``), ``t.NC`` for a
non-contiguous leaf, ``t.const`` for constants (index tensors, masks, fixed operands) and
``t.S(name, fn, *inputs, **tol)`` to make a :class:`Sample`. The library never imports this
module, and importing minidl builds no sample: they are built here, once, when the tests load.

A sample is a callable on float64 tensors plus the values of those tensors. Values that must
reach the op through a non-contiguous leaf are wrapped in :class:`NC`. Inputs are chosen away
from the points where an op is not differentiable (ties for max, 0 for abs/relu, integers for
floor, clamp bounds ...). Index tensors, masks and other constants are made inside the callables
(with ``t.const``, so that test_cuda_ops can put them on its device), from values drawn when the
sample is built. A sample made with ``second_order=True`` is a second-order check (gradgradcheck)
instead of a first-order one.

:func:`collect` calls every declaration's ``samples`` in registry order, each with the input
makers reseeded from the op's name (so each op's values stay the same whatever ops are added or
moved): ``SAMPLES`` holds (op name, sample) pairs, ``FIRST_ORDER`` and ``SECOND_ORDER`` split them,
and ``STRIDED`` is made from the first-order ones: each again with its plain inputs column-major
and again read backwards (negative strides), so every op meets strided memory whether or not its
declaration asks for it (``any_layout=False`` opts out, for ops such as ``view`` that need
packed inputs). Used by test_gradcheck (gradcheck of the first-order and strided samples,
gradgradcheck of the second-order ones, the float32 forward against the float64 one; every
Function under minidl.ops recorded by some sample; every sample running its op; every
differentiable op with a sample) and test_cuda_ops (every sample on 'cuda' against the CPU).
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
import zlib

import numpy as np

import minidl
from minidl.autograd import Function
from minidl.ops import registry

SEED = 20240531
_rng = np.random.default_rng(SEED)  # reseeded per op by collect()

# Function subclasses that only template concrete ops (each must have concrete subclasses)
ABSTRACT = {"Unary", "Binary", "View"}


def function_classes() -> dict:
    """name -> class for every Function subclass defined in (any submodule of) minidl.ops."""
    import minidl.ops as ops_pkg
    for info in pkgutil.walk_packages(ops_pkg.__path__, "minidl.ops."):
        importlib.import_module(info.name)
    found, stack, seen = {}, [Function], set()
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub in seen:
                continue
            seen.add(sub)
            stack.append(sub)
            if sub.__module__.startswith("minidl.ops"):
                assert sub.__name__ not in found, f"two Function classes named {sub.__name__}"
                found[sub.__name__] = sub
    return found


# ----------------------------------------------------------------------------- inputs
class NC:
    """Values to be passed as a non-contiguous leaf: 'F' (column-major), 'gap' (every other
    element of a wider buffer) or 'neg' (negative stride on dim 0)."""

    def __init__(self, values, kind="F"):
        self.values, self.kind = np.asarray(values, dtype=np.float64), kind

    def materialize(self, values: np.ndarray) -> np.ndarray:
        kind = self.kind
        if kind == "F" and values.ndim >= 2:
            return np.asfortranarray(values)
        if kind == "neg" and values.ndim >= 1:
            return np.ascontiguousarray(values[::-1])[::-1]
        wide = np.zeros(values.shape[:-1] + (2 * values.shape[-1],), dtype=values.dtype)
        wide[..., ::2] = values
        return wide[..., ::2]


def values_of(spec) -> np.ndarray:
    return spec.values if isinstance(spec, NC) else np.asarray(spec, dtype=np.float64)


def make_leaf(spec, values, requires_grad=True, dtype=np.float64):
    """A leaf holding ``values`` (float64, or ``dtype``), with the memory layout ``spec`` asks for."""
    if isinstance(spec, NC):
        t = minidl.from_numpy(spec.materialize(np.array(values, dtype=dtype)))
        assert not t.is_contiguous() or t.numel() <= 1
    else:
        t = minidl.from_numpy(np.array(values, dtype=dtype))
    return t.requires_grad_(requires_grad)


def rn(*shape):
    return _rng.standard_normal(shape)


def pos(*shape):
    return _rng.uniform(0.5, 2.0, shape)


def uniform(lo, hi, *shape):
    return _rng.uniform(lo, hi, shape)


def nonzero(*shape):
    return _rng.choice([-1.0, 1.0], shape) * _rng.uniform(0.3, 2.0, shape)


def distinct(*shape):
    """Values at least 0.2 apart from each other (no ties for max/min/sort-like ops)."""
    n = int(np.prod(shape))
    return (_rng.permutation(n) * 0.3 - 0.15 * n + _rng.uniform(-0.05, 0.05, n)).reshape(shape)


def frac(*shape):
    """Values at least 0.2 away from any integer (floor, round, ... are locally constant)."""
    return _rng.integers(-3, 3, shape) + _rng.uniform(0.2, 0.8, shape)


def avoid(shape, points, lo=-1.5, hi=1.5, gap=0.05):
    """Uniform values in [lo, hi] at least ``gap`` away from each of the scalars ``points``."""
    out = _rng.uniform(lo, hi, shape)
    for _ in range(100):
        bad = np.zeros(shape, bool)
        for p in points:
            bad |= np.abs(out - p) < gap
        if not bad.any():
            return out
        out = np.where(bad, _rng.uniform(lo, hi, shape), out)
    raise AssertionError("could not draw values away from the given points")


def zeros_at(values, *places):
    """``values`` with zeros at the index tuples ``places`` (prod/cumprod's special case)."""
    values = np.array(values, dtype=np.float64)
    for place in places:
        values[place] = 0.0
    return values


# ----------------------------------------------------------------------------- inside the callables
DEVICE = "cpu"  # where const() puts its tensors (test_cuda_ops runs the samples on "cuda" too)
FLOAT = minidl.float64  # the dtype of const()'s float tensors (the float32 sweep sets float32)
float32, float64, cpu = minidl.float32, minidl.float64, minidl.device("cpu")


def const(values, dtype=None):
    """A constant (no grad) tensor on DEVICE: index tensors, masks, fixed operands."""
    values = np.asarray(values)
    if dtype is None and values.dtype.kind == "f":
        dtype = FLOAT
    return minidl.tensor(values, dtype=dtype, device=DEVICE)


def vjp(output, input, cotangent):
    """The gradient of ``output`` for ``cotangent`` with respect to ``input``, as a differentiable
    function of both (create_graph): a first backward, to be checked as an op of its own."""
    return minidl.autograd.grad(output, input, cotangent, create_graph=True)[0]


# ----------------------------------------------------------------------------- samples
class Sample:
    def __init__(self, name, fn, *inputs, eps=1e-6, atol=1e-5, rtol=1e-4, second_order=False, any_layout=True):
        self.name, self.fn, self.inputs = name, fn, list(inputs)
        self.eps, self.atol, self.rtol = eps, atol, rtol
        self.second_order = second_order
        self.any_layout = any_layout  # False: the sample needs its plain inputs contiguous (x.view)

    def __repr__(self):
        return self.name


def S(name, fn, *inputs, **options):
    """A sample: ``fn`` on leaves made from ``inputs``; options: eps, atol, rtol, second_order,
    any_layout."""
    return Sample(name, fn, *inputs, **options)


LAYOUTS = {"F": ("colmajor", 2), "neg": ("negstride", 1)}  # NC kind -> (name suffix, inputs' least ndim)


def layout_variants(sample) -> list:
    """The sample again with its plain inputs column-major, and again with them read backwards
    (negative strides), where that changes any input: every op meets strided memory."""
    def strided(spec, kind):
        values = np.asarray(spec, dtype=np.float64)
        return not minidl.from_numpy(NC(values, kind).materialize(values)).is_contiguous()

    variants = []
    for kind, (suffix, least_ndim) in LAYOUTS.items():
        inputs = [NC(spec, kind) if not isinstance(spec, NC) and np.ndim(spec) >= least_ndim and strided(spec, kind)
                  else spec for spec in sample.inputs]
        if sample.any_layout and any(a is not b for a, b in zip(inputs, sample.inputs)):
            variants.append(Sample(f"{sample.name}-{suffix}", sample.fn, *inputs, eps=sample.eps, atol=sample.atol,
                                   rtol=sample.rtol))
    return variants


def _reseed(name):
    global _rng
    _rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])


def collect() -> list:
    """(op name, sample) for every sample of every op declared in the registry, in registry order."""
    toolkit = sys.modules[__name__]
    found, seen = [], set()
    for d in registry.OPS.values():
        if d.samples is None:
            continue
        _reseed(d.name)
        samples = d.samples(toolkit)
        assert samples, f"op {d.name!r} declares an empty list of samples"
        for s in samples:
            assert isinstance(s, Sample), f"op {d.name!r}: {s!r} is not a Sample (make it with t.S)"
            key = (d.name, s.name, s.second_order)
            assert key not in seen, f"op {d.name!r} has two samples named {s.name!r}"
            seen.add(key)
            found.append((d.name, s))
    return found


SAMPLES = collect()
FIRST_ORDER = [(name, s) for name, s in SAMPLES if not s.second_order]
SECOND_ORDER = [(name, s) for name, s in SAMPLES if s.second_order]
STRIDED = [(name, v) for name, s in FIRST_ORDER for v in layout_variants(s)]  # generated layouts


def sample_id(name, sample) -> str:
    """The test id of a sample: 'opname-samplename' (with '-gradgrad' for a second-order one)."""
    return f"{name}-{sample.name}" + ("-gradgrad" if sample.second_order else "")
