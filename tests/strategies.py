"""Hypothesis strategies for arbitrary strided views, with numpy as the oracle.

A case starts from a base array of a drawn shape (zero-size dims included) and
applies a random chain of view ops: permute/transpose, slicing with any start,
stop and step (negative steps too), integer select, expand (zero strides),
unsqueeze/squeeze, diagonal, narrow and reshape. Each step is recorded as a pair
of functions -- one for numpy, one for minidl -- so the same chain can be
replayed on any numpy array of the base's shape (for instance on the flat
element ids ``np.arange(base.size)``, which tells where every view element
lives in the base).

Public API:

* ``view_cases(...)``   -> :class:`ViewCase` (the minidl view, the numpy view, both bases, the steps)
* ``views(...)``        -> ``(minidl view, numpy view)``
* ``broadcast_pairs(...)`` -> ``((t1, a1), (t2, a2))`` two views whose shapes broadcast together
* ``base_arrays(...)``  -> a fresh numpy array (values drawn for a "domain")
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

import minidl

NP_DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
             "bool": np.bool_}
MINIDL_DTYPES = {"float32": minidl.float32, "float64": minidl.float64, "int64": minidl.int64,
                 "int32": minidl.int32, "bool": minidl.bool}
FLOAT_DTYPES = ("float32", "float64")
ALL_DTYPES = ("float32", "float64", "int64", "bool")


# ----------------------------------------------------------------------------- values
def fill_values(rng: np.random.Generator, shape, dtype: str, domain: str = "normal") -> np.ndarray:
    return np.asarray(_fill_values(rng, tuple(shape), dtype, domain), dtype=NP_DTYPES[dtype])


def _fill_values(rng, shape, dtype, domain):
    """Values of ``shape`` for one input domain:

    normal   -- standard normal (floats), integers in [-6, 6] (ints)
    positive -- floats in [0.1, 4] / integers in [1, 6]
    unit     -- floats in (-0.95, 0.95)  (log1p, atanh-like domains)
    nonzero  -- like ``normal`` but bounded away from zero (divisors)
    small    -- floats in [-2, 2] (exp, pow, prod without overflow)
    """
    np_dtype = NP_DTYPES[dtype]
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        if domain in ("positive", "nonzero"):
            v = rng.integers(1, 7, shape)
            if domain == "nonzero":
                v = v * rng.choice([-1, 1], shape)
            return v.astype(np_dtype)
        return rng.integers(-6, 7, shape).astype(np_dtype)
    if domain == "positive":
        v = rng.uniform(0.1, 4.0, shape)
    elif domain == "unit":
        v = rng.uniform(-0.95, 0.95, shape)
    elif domain == "nonzero":
        v = rng.uniform(0.5, 3.0, shape) * rng.choice([-1.0, 1.0], shape)
    elif domain == "small":
        v = rng.uniform(-2.0, 2.0, shape)
    else:
        v = rng.standard_normal(shape) * 2
    return v.astype(np_dtype)


def shapes(min_dims=0, max_dims=4, min_side=0, max_side=4):
    """Shapes whose sides are mostly in [max(min_side, 1), max_side], zero now and then."""
    sides = [n for n in range(max(min_side, 1), max_side + 1)] * 3 + ([0] if min_side == 0 else [])
    return st.lists(st.sampled_from(sides), min_size=min_dims, max_size=max_dims).map(tuple)


@st.composite
def base_arrays(draw, dtype="float32", domain="normal", min_dims=0, max_dims=4, min_side=0, max_side=4,
                shape=None):
    """A fresh C-contiguous numpy array; values come from a drawn seed (fast, still shrinkable)."""
    if isinstance(dtype, (list, tuple)):
        dtype = draw(st.sampled_from(dtype))
    if shape is None:
        shape = draw(shapes(min_dims, max_dims, min_side, max_side))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return fill_values(np.random.default_rng(seed), shape, dtype, domain)


# ----------------------------------------------------------------------------- view chains
@dataclass
class ViewCase:
    """A minidl view and its numpy twin, built by the same chain of view ops."""
    t: minidl.Tensor              # the minidl view
    a: np.ndarray                 # the numpy oracle of its values
    base_t: minidl.Tensor         # the minidl tensor the chain started from (contiguous)
    base_a: np.ndarray            # the numpy array the chain started from
    steps: list = field(default_factory=list)  # (description, numpy fn, minidl fn)

    def replay_np(self, array: np.ndarray) -> np.ndarray:
        """Apply the chain's numpy side to another array of the base's shape."""
        for _, np_fn, _ in self.steps:
            array = np_fn(array)
        return array

    def ids(self) -> np.ndarray:
        """For each view element, the flat (row-major) index of the base element it shows."""
        return self.replay_np(np.arange(self.base_a.size, dtype=np.int64).reshape(self.base_a.shape))

    def __repr__(self):
        chain = " -> ".join(d for d, _, _ in self.steps) or "(no view)"
        return (f"ViewCase(base shape={self.base_a.shape}, dtype={self.base_a.dtype}, chain: {chain}, "
                f"view shape={self.a.shape})")


def _slice_step(draw, shape):
    d = draw(st.integers(0, len(shape) - 1))
    n = shape[d]
    bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    start, stop = draw(bound), draw(bound)
    step = draw(st.sampled_from([1, 1, 2, 3, -1, -1, -2, -3, None]))
    idx = (slice(None),) * d + (slice(start, stop, step),)
    return f"[{':,' * d}{start}:{stop}:{step}]", (lambda a: a[idx]), (lambda t: t[idx])


def _select_step(draw, shape):
    dims = [d for d, n in enumerate(shape) if n > 0]
    if not dims:
        return None
    d = draw(st.sampled_from(dims))
    i = draw(st.integers(-shape[d], shape[d] - 1))
    idx = (slice(None),) * d + (i,)
    # (numpy: a trailing Ellipsis keeps a 0-d result a view instead of a scalar copy)
    return f"[{':,' * d}{i}]", (lambda a: a[idx + (Ellipsis,)]), (lambda t: t[idx])


def _permute_step(draw, shape):
    nd = len(shape)
    kind = draw(st.sampled_from(["permute", "transpose", "T", "mT", "t"]))
    if kind == "transpose":
        d0, d1 = draw(st.integers(-nd, nd - 1)), draw(st.integers(-nd, nd - 1))
        return f"transpose({d0},{d1})", (lambda a: np.swapaxes(a, d0, d1)), (lambda t: t.transpose(d0, d1))
    if kind == "T":
        return ".T", (lambda a: a.T), (lambda t: t.T)
    if kind == "mT" and nd >= 2:
        return ".mT", (lambda a: np.swapaxes(a, -1, -2)), (lambda t: t.mT)
    if kind == "t" and nd <= 2:
        return ".t()", (lambda a: a.T), (lambda t: t.t())
    perm = draw(st.permutations(range(nd)))
    return f"permute{tuple(perm)}", (lambda a: np.transpose(a, perm)), (lambda t: t.permute(*perm))


def _expand_step(draw, shape):
    lead = draw(st.integers(0, 2 if len(shape) < 4 else 0))
    new = [draw(st.sampled_from([2, 3, 1, 0])) for _ in range(lead)]
    for n in shape:
        new.append(draw(st.sampled_from([2, 3, 1, 0])) if n == 1 else draw(st.sampled_from([n, -1])))
    np_shape = tuple(new[:lead]) + tuple(shape[i] if m == -1 else m for i, m in enumerate(new[lead:]))
    new = tuple(new)
    return f"expand{new}", (lambda a: np.broadcast_to(a, np_shape)), (lambda t: t.expand(*new))


def _unsqueeze_step(draw, shape):
    nd = len(shape)
    d = draw(st.integers(-nd - 1, nd))
    if draw(st.booleans()):
        return f"unsqueeze({d})", (lambda a: np.expand_dims(a, d)), (lambda t: t.unsqueeze(d))
    pos = d % (nd + 1)
    idx = (slice(None),) * pos + (None,)
    return f"[{':,' * pos}None]", (lambda a: a[idx]), (lambda t: t[idx])


def _squeeze_step(draw, shape):
    nd = len(shape)
    if nd == 0 or draw(st.booleans()):
        return "squeeze()", (lambda a: np.squeeze(a)), (lambda t: t.squeeze())
    d = draw(st.integers(-nd, nd - 1))
    np_fn = (lambda a: np.squeeze(a, d)) if shape[d] == 1 else (lambda a: a)
    return f"squeeze({d})", np_fn, (lambda t: t.squeeze(d))


def _diagonal_step(draw, shape):
    nd = len(shape)
    d1 = draw(st.integers(-nd, nd - 1))
    d2 = draw(st.sampled_from([d for d in range(-nd, nd) if d % nd != d1 % nd]))
    off = draw(st.integers(-3, 3))
    return f"diagonal({off},{d1},{d2})", (lambda a: np.diagonal(a, off, d1, d2)), \
        (lambda t: t.diagonal(off, d1, d2))


def _narrow_step(draw, shape):
    dims = [d for d in range(len(shape))]
    d = draw(st.sampled_from(dims))
    n = shape[d]
    start = draw(st.integers(0, n))
    length = draw(st.integers(0, n - start))
    if draw(st.booleans()) and start > 0:
        start_arg = start - n      # negative start, as PyTorch allows
    else:
        start_arg = start
    idx = (slice(None),) * d + (slice(start, start + length),)
    return f"narrow({d},{start_arg},{length})", (lambda a: a[idx]), (lambda t: t.narrow(d, start_arg, length))


def _reshape_step(draw, shape):
    numel = math.prod(shape)
    kind = draw(st.sampled_from(["flatten", "reshape"]))
    if kind == "flatten" or numel == 0:
        return "flatten()", (lambda a: a.reshape(-1)), (lambda t: t.flatten())
    # split numel into a random factorisation
    factors, rest = [], numel
    while rest > 1 and len(factors) < 3:
        divisors = [k for k in range(1, rest + 1) if rest % k == 0]
        k = draw(st.sampled_from(divisors))
        factors.append(k)
        rest //= k
    factors.append(rest)
    new = tuple(factors)
    if draw(st.booleans()):
        new_arg = tuple(-1 if i == 0 else n for i, n in enumerate(new))
    else:
        new_arg = new
    return f"reshape{new_arg}", (lambda a: a.reshape(new)), (lambda t: t.reshape(new_arg))


_STEPS = {
    "slice": (_slice_step, 1),
    "select": (_select_step, 1),
    "permute": (_permute_step, 1),
    "expand": (_expand_step, 0),
    "unsqueeze": (_unsqueeze_step, 0),
    "squeeze": (_squeeze_step, 0),
    "diagonal": (_diagonal_step, 2),
    "narrow": (_narrow_step, 1),
    "reshape": (_reshape_step, 0),
}
VIEW_KINDS = tuple(k for k in _STEPS if k != "reshape")


@st.composite
def view_cases(draw, dtype=ALL_DTYPES, domain="normal", min_dims=0, max_dims=4, max_side=4, max_steps=4,
               kinds=VIEW_KINDS, out_min_dims=None, out_max_dims=5, max_numel=400, shape=None):
    """A :class:`ViewCase`: a minidl view and its numpy twin.

    ``kinds`` picks the view ops the chain may use (default: every true view op;
    add ``"reshape"``, which may copy). ``out_min_dims``/``out_max_dims`` bound
    the final view's rank (default: at least ``min_dims``).
    """
    out_min_dims = min_dims if out_min_dims is None else out_min_dims
    if isinstance(dtype, (list, tuple)):
        dtype = draw(st.sampled_from(dtype))
    base_a = draw(base_arrays(dtype, domain, min_dims, max_dims, 0, max_side, shape=shape))
    base_t = minidl.tensor(base_a)
    a, t = base_a, base_t
    steps = []
    n_steps = draw(st.sampled_from(list(range(1, max_steps + 1)) + [0]))
    for _ in range(n_steps):
        kind = draw(st.sampled_from(kinds))
        make, min_nd = _STEPS[kind]
        if a.ndim < min_nd:
            continue
        step = make(draw, a.shape)
        if step is None:
            continue
        _, np_fn, t_fn = step
        new_a = np_fn(a)
        if new_a.size > max_numel or new_a.ndim > out_max_dims + 1:
            continue
        a, t = new_a, t_fn(t)
        steps.append(step)
    # bring the rank into the requested range with plain unsqueeze / select steps
    while a.ndim < out_min_dims:
        step = ("unsqueeze(0)", (lambda x: x[None]), (lambda x: x.unsqueeze(0)))
        a, t = step[1](a), step[2](t)
        steps.append(step)
    while a.ndim > out_max_dims:
        if a.shape[0] > 0:
            step = ("[0]", (lambda x: x[0, ...]), (lambda x: x[0]))
        else:
            step = ("flatten(0,1)", (lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])),
                    (lambda x: x.flatten(0, 1)))
        a, t = step[1](a), step[2](t)
        steps.append(step)
    return ViewCase(t, a, base_t, base_a, steps)


def views(**kwargs):
    """``(minidl view, numpy array)`` pairs; see :func:`view_cases` for the arguments."""
    return view_cases(**kwargs).map(lambda c: (c.t, c.a))


@st.composite
def view_of_shape(draw, shape, dtype="float32", domain="normal", max_steps=3):
    """A (minidl view, numpy array) of exactly ``shape``: a bigger base, sliced (any step sign),
    permuted and/or expanded down to ``shape`` -- so the values sit at arbitrary strides."""
    nd = len(shape)
    perm = draw(st.permutations(range(nd))) if nd else []
    expand_dims = [d for d in range(nd) if draw(st.integers(0, 4)) == 0] if max_steps else []
    # base holds the permuted, strided data; dims that will be expanded have size 1 there
    want = [1 if d in expand_dims else shape[d] for d in range(nd)]
    steps = [draw(st.sampled_from([1, 1, 2, -1, -2])) if max_steps else 1 for _ in range(nd)]
    pads = [draw(st.integers(0, 1)) if max_steps else 0 for _ in range(nd)]
    base_shape = [0] * nd
    for d in range(nd):
        base_shape[perm[d]] = max(want[d] * abs(steps[d]) + pads[d], 1) if want[d] else pads[d]
    base_a = draw(base_arrays(dtype, domain, shape=tuple(base_shape)))
    base_t = minidl.tensor(base_a)
    # base dim perm[d] holds view dim d: permute the base by perm to bring it to view order
    a, t = np.transpose(base_a, perm) if nd else base_a, base_t.permute(*perm) if nd else base_t
    idx = []
    for d in range(nd):
        s = steps[d]
        if s > 0:
            idx.append(slice(pads[d], pads[d] + want[d] * s, s))
        elif want[d] == 0:
            idx.append(slice(0, 0, s))
        else:
            # from the last element but pads[d], backwards: exactly want[d] elements
            idx.append(slice(a.shape[d] - 1 - pads[d], None, s))
    idx = tuple(idx)
    a, t = a[idx], t[idx]
    assert a.shape == tuple(want), (a.shape, want)
    if expand_dims:
        a, t = np.broadcast_to(a, shape), t.expand(*shape)
    return t, a


@st.composite
def broadcast_shape_tuples(draw, n=2, min_dims=0, max_dims=4, max_side=4):
    """``n`` shapes that broadcast together (size-1 dims, missing leading dims, zero sizes)."""
    out = draw(shapes(min_dims, max_dims, 0, max_side))
    result = []
    for _ in range(n):
        shape = [1 if draw(st.integers(0, 2)) == 0 else m for m in out]
        drop = draw(st.sampled_from([0, 0, 1, 2])) if out else 0
        result.append(tuple(shape[min(drop, len(shape)):]))
    return tuple(result)


def broadcast_shape_pairs(min_dims=0, max_dims=4, max_side=4):
    return broadcast_shape_tuples(2, min_dims, max_dims, max_side)


@st.composite
def broadcast_pairs(draw, dtype="float32", dtype2=None, domain="normal", domain2=None, max_dims=4, max_side=4,
                    strided=True):
    """Two (minidl view, numpy array) pairs whose shapes broadcast together, each an arbitrary
    strided view (permuted, sliced with negative steps, expanded)."""
    s1, s2 = draw(broadcast_shape_pairs(0, max_dims, max_side))
    if isinstance(dtype, (list, tuple)):
        dtype = draw(st.sampled_from(dtype))
    dtype2 = dtype if dtype2 is None else dtype2
    if isinstance(dtype2, (list, tuple)):
        dtype2 = draw(st.sampled_from(dtype2))
    steps = 3 if strided else 0
    x = draw(view_of_shape(s1, dtype, domain, steps))
    y = draw(view_of_shape(s2, dtype2, domain2 or domain, steps))
    return x, y


@st.composite
def broadcast_views(draw, dtypes, domains=None, max_dims=4, max_side=4, strided=True):
    """One (minidl view, numpy array) per entry of ``dtypes`` (a dtype name or a list to pick
    from), shapes broadcasting together, each an arbitrary strided view."""
    n = len(dtypes)
    domains = domains or ["normal"] * n
    shapes_ = draw(broadcast_shape_tuples(n, 0, max_dims, max_side))
    out = []
    for shape, dtype, domain in zip(shapes_, dtypes, domains):
        if isinstance(dtype, (list, tuple)):
            dtype = draw(st.sampled_from(dtype))
        out.append(draw(view_of_shape(shape, dtype, domain, 3 if strided else 0)))
    return out
