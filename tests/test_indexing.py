"""Indexing (``x[...]``, ``x[...] = v``) and the gather/scatter family against numpy.

numpy is the oracle, with one deliberate difference that PyTorch has: plain
integers are *basic* indices (applied first, as a select), so they never take
part in numpy's "advanced indices separated by a slice go to the front" rule.
The oracle therefore applies the integers first and the rest second. Likewise an
ellipsis is only shorthand for full slices: one standing for no dims does not
separate the advanced indices around it (numpy says it does).
"""
import numpy as np
import pytest
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import minidl


def check_equal(out, expected, dtype=None):
    expected = np.asarray(expected)
    assert tuple(out.shape) == expected.shape, (tuple(out.shape), expected.shape)
    if dtype is not None:
        assert out.dtype is dtype, (out.dtype, dtype)
    np.testing.assert_array_equal(out.numpy(), expected)


# ----------------------------------------------------------------------------- index expressions
class Expr:
    """One index expression: its minidl form and the two-pass numpy oracle."""

    def __init__(self, items, ndim):
        self.items = items          # list of (kind, minidl item, numpy item, dims consumed)
        self.ndim = ndim

    @property
    def minidl(self):
        return tuple(m for _, m, _, _ in self.items)

    def numpy_index(self, a):
        """numpy result of the expression on ``a`` (ints first, as PyTorch)."""
        first = [slice(None)] * a.ndim
        second = []
        d = 0
        for pos, (kind, _, np_item, consumed) in enumerate(self.items):
            if kind == "ellipsis":
                # the ellipsis stands for the dims the items after it leave over; spelled out as
                # full slices because (as in PyTorch) an ellipsis of no dims separates nothing
                new_d = a.ndim - sum(c for _, _, _, c in self.items[pos + 1:])
                second += [slice(None)] * (new_d - d)
                d = new_d
                continue
            if kind == "int":
                first[d] = np_item
            else:
                second.append(np_item)
            d += consumed
        b = a[tuple(first) + (Ellipsis,)]
        return b[tuple(second)] if second else b

    def __repr__(self):
        return f"Expr({[k for k, _, _, _ in self.items]}: {self.minidl!r})"


@st.composite
def index_exprs(draw, shape, advanced=True, allow_mask=True, allow_ellipsis=True):
    nd = len(shape)
    # advanced integer arrays share one broadcast shape
    bshape = draw(S.shapes(0, 2, 1, 3))
    kinds = ["int", "slice", "full", "none"] + (["array", "list"] if advanced else [])
    use_mask = advanced and allow_mask and draw(st.integers(0, 3)) == 0
    mask_placed = False
    items = []
    ell_pos = draw(st.integers(0, nd)) if allow_ellipsis and draw(st.booleans()) else None
    stop = draw(st.integers(0, nd)) if ell_pos is None else nd
    d = 0
    while d < stop:
        if ell_pos is not None and d == ell_pos:
            skip = draw(st.integers(0, nd - d))
            items.append(("ellipsis", Ellipsis, Ellipsis, 0))
            d += skip
            ell_pos = None
            continue
        n = shape[d]
        kind = draw(st.sampled_from(kinds + (["mask"] if use_mask and not mask_placed else [])))
        if kind == "none":
            items.append(("none", None, None, 0))
            continue
        if kind in ("int", "array", "list") and n == 0:
            kind = "slice"
        if kind == "int":
            i = draw(st.integers(-n, n - 1))
            items.append(("int", i, i, 1))
        elif kind == "slice":
            bound = st.one_of(st.none(), st.integers(-n - 1, n + 1))
            sl = slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, -1, -2, 3])))
            items.append(("slice", sl, sl, 1))
        elif kind == "full":
            items.append(("full", slice(None), slice(None), 1))
        elif kind in ("array", "list"):
            if mask_placed or use_mask:
                ishape = draw(st.sampled_from([(), (1,)]))   # keeps broadcasting with the mask's count
            else:
                ishape = tuple(m if draw(st.integers(0, 3)) else 1 for m in bshape)
            seed = draw(st.integers(0, 2 ** 16))
            arr = np.random.default_rng(seed).integers(-n, n, ishape)
            if ishape == ():
                arr = np.asarray([int(arr)])
            if kind == "list":
                items.append(("list", arr.tolist(), arr, 1))
            else:
                dtype = draw(st.sampled_from([minidl.int64, minidl.int32]))
                items.append(("array", minidl.tensor(arr, dtype=dtype), arr, 1))
        else:   # boolean mask over 1 or 2 dims
            k = draw(st.integers(1, min(2, stop - d)))
            mshape = tuple(shape[d:d + k])
            seed = draw(st.integers(0, 2 ** 16))
            mask = np.random.default_rng(seed).random(mshape) < 0.5
            mask_placed = True
            as_list = k == 1 and draw(st.booleans())
            items.append(("mask", mask.tolist() if as_list else minidl.tensor(mask), mask, k))
            d += k
            continue
        d += 1
    if ell_pos is not None:
        items.append(("ellipsis", Ellipsis, Ellipsis, 0))
    if draw(st.booleans()):
        items.append(("none", None, None, 0))
    return Expr(items, nd)


@given(S.view_cases(dtype=("float32", "int64", "bool")), st.data())
def test_basic_indexing_is_a_view_matching_numpy(case, data):
    expr = data.draw(index_exprs(case.a.shape, advanced=False), label="index")
    idx = expr.minidl
    out = case.t[idx if len(idx) != 1 else idx[0]]
    exp = expr.numpy_index(case.a)
    check_equal(out, exp, case.t.dtype)
    assert out.untyped_storage_id() == case.t.untyped_storage_id()


@given(S.view_cases(dtype=("float32", "int64", "bool"), max_side=4), st.data())
def test_advanced_indexing_matches_numpy(case, data):
    expr = data.draw(index_exprs(case.a.shape), label="index")
    idx = expr.minidl
    out = case.t[idx if len(idx) != 1 else idx[0]]
    check_equal(out, expr.numpy_index(case.a), case.t.dtype)


@given(S.view_cases(dtype=("float32", "int64"), kinds=tuple(k for k in S.VIEW_KINDS if k != "expand")),
       st.data())
def test_setitem_matches_numpy(case, data):
    expr = data.draw(index_exprs(case.a.shape), label="index")
    idx = expr.minidl
    idx = idx if len(idx) != 1 else idx[0]
    ids = case.ids()
    target_ids = np.asarray(expr.numpy_index(ids))
    tshape = target_ids.shape
    # a value broadcasting to the target: a scalar, a tensor of a suffix of the shape, or size-1 dims
    kind = data.draw(st.sampled_from(["scalar", "tensor", "ones"]))
    unique = np.unique(target_ids).size == target_ids.size
    if kind == "scalar" or not unique:
        value_np = np.asarray(data.draw(st.integers(-9, 9)), case.a.dtype)
        value = value_np.item()
    else:
        keep = data.draw(st.integers(0, len(tshape)))
        vshape = tuple(1 if data.draw(st.integers(0, 2)) == 0 and kind == "ones" else m
                       for m in tshape[len(tshape) - keep:])
        value_np = S.fill_values(np.random.default_rng(data.draw(st.integers(0, 99))), vshape, case.a.dtype.name)
        value = minidl.tensor(value_np)
    expected = case.base_a.copy()
    expected.reshape(-1)[target_ids.reshape(-1)] = np.broadcast_to(value_np, tshape).reshape(-1)
    case.t[idx] = value
    np.testing.assert_array_equal(case.base_t.numpy(), expected)


# ----------------------------------------------------------------------------- fixed cases
def test_numpy_placement_rules():
    a = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    x = minidl.tensor(a)
    i, j = np.array([0, 1, 1]), np.array([[2], [0]])
    cases = [
        (np.s_[:, i, j], "adjacent: stay in place"),
        (np.s_[i, :, j], "separated by a slice: to the front"),
        (np.s_[:, i, :, i], "separated: to the front"),
        (np.s_[..., i, j], "adjacent after an ellipsis"),
        (np.s_[i, j], "leading"),
        (np.s_[None, :, i, j], "None before"),
        (np.s_[:, i, None, j], "separated by None: to the front"),
        (np.s_[i[:, None], :, :, i], "broadcast (3,1) with (3,) to (3,3), to the front"),
    ]
    for idx, why in cases:
        t_idx = tuple(minidl.tensor(v) if isinstance(v, np.ndarray) else v for v in idx)
        check_equal(x[t_idx], a[idx])
        t_list = tuple(v.tolist() if isinstance(v, np.ndarray) else v for v in idx)
        check_equal(x[t_list], a[idx])
    # an ellipsis standing for no dims separates nothing (PyTorch; numpy would move the block)
    b = np.zeros((2, 1, 1))
    assert minidl.tensor(b)[:, [0], ..., [0]].shape == (2, 1)
    # an integer is a basic index (applied first), unlike numpy where it joins the advanced ones
    assert x[1, :, [0, 1]].shape == (3, 2, 5)
    check_equal(x[1, :, [0, 1]], a[1][:, [0, 1]])
    check_equal(x[:, 1, [0, 2], :], a[:, 1][:, [0, 2], :])


def test_boolean_masks():
    a = np.arange(24.).reshape(2, 3, 4)
    x = minidl.tensor(a)
    m = a > 10
    check_equal(x[minidl.tensor(m)], a[m])
    check_equal(x[x > 10], a[m])
    m2 = np.array([True, False, True])
    check_equal(x[:, minidl.tensor(m2)], a[:, m2])
    check_equal(x[:, [True, False, True]], a[:, m2])
    check_equal(x[..., minidl.tensor([True, False, False, True])], a[..., [True, False, False, True]])
    m3 = np.array([[True, False, True], [False, False, True]])
    check_equal(x[minidl.tensor(m3)], a[m3])
    check_equal(x[minidl.tensor(m3), 1:3], a[m3, 1:3])
    check_equal(x[minidl.tensor(m3), minidl.tensor([0, 1, 3])], a[m3, [0, 1, 3]])
    check_equal(x[minidl.zeros(2, 3, 4, dtype=minidl.bool)], np.zeros(0))
    # 0-d boolean index: adds a dim of size 1 or 0
    check_equal(x[minidl.tensor(True)], a[np.True_])
    check_equal(x[minidl.tensor(False)], a[np.False_])
    check_equal(x[True], a[True])
    with pytest.raises(IndexError):
        x[minidl.tensor([True, False, True])]    # wrong mask shape
    with pytest.raises(IndexError):
        x[:, minidl.ones(4, dtype=minidl.bool)]


def test_index_results_are_copies_for_advanced_views_for_basic():
    x = minidl.arange(12.).reshape(3, 4)
    adv = x[[0, 2]]
    assert adv.untyped_storage_id() != x.untyped_storage_id()
    adv[0, 0] = 100.
    assert x[0, 0].item() == 0.
    basic = x[0:2, ::-1]
    assert basic.untyped_storage_id() == x.untyped_storage_id()
    m = x[x > 5]
    assert m.untyped_storage_id() != x.untyped_storage_id()


def test_index_errors():
    x = minidl.arange(12.).reshape(3, 4)
    with pytest.raises(IndexError):
        x[3]
    with pytest.raises(IndexError):
        x[-4]
    with pytest.raises(IndexError):
        x[0, 4]
    with pytest.raises(IndexError):
        x[[0, 3]]
    with pytest.raises(IndexError):
        x[[-4]]
    with pytest.raises(IndexError):
        x[:, minidl.tensor([1, 5])]
    with pytest.raises(IndexError):
        x[minidl.tensor([[0], [7]]), minidl.tensor([0, 1])]
    with pytest.raises(IndexError):
        x[0, 0, 0]
    with pytest.raises(IndexError):
        x[..., 0, ...]
    with pytest.raises(IndexError):
        x[[0, 1], [0, 1, 2]]                       # can't broadcast (2,) with (3,)
    with pytest.raises(TypeError):
        x[minidl.tensor([0., 1.])]
    with pytest.raises(TypeError):
        x[[0.5, 1.0]]
    with pytest.raises(TypeError):
        x[1.5]
    with pytest.raises(TypeError):
        x["a"]
    with pytest.raises(IndexError):
        x[[0, 3]] = 1.
    with pytest.raises(IndexError):
        x[5] = 1.
    with pytest.raises(TypeError):
        x[minidl.tensor([0.])] = 1.
    # nothing was written by the failed assignments
    np.testing.assert_array_equal(x.numpy(), np.arange(12.).reshape(3, 4))
    # empty index lists select nothing
    check_equal(x[[]], np.arange(12.).reshape(3, 4)[[]])
    check_equal(x[minidl.tensor([], dtype=minidl.int64)], np.zeros((0, 4)))


def test_0d_and_scalar_like_indices():
    a = np.arange(6).reshape(2, 3)
    x = minidl.tensor(a)
    check_equal(x[minidl.tensor(1)], a[1])                      # 0-d int tensor: an integer
    check_equal(x[minidl.tensor(1), minidl.tensor(2)], a[1, 2])
    check_equal(x[np.int64(1)], a[1])
    check_equal(x[:, minidl.tensor([2])], a[:, [2]])
    check_equal(x[()], a)
    assert x[()].untyped_storage_id() == x.untyped_storage_id()
    s = minidl.tensor(5.)
    check_equal(s[()], np.asarray(5., np.float32))
    check_equal(s[None], np.asarray([5.], np.float32))
    check_equal(s[...], np.asarray(5., np.float32))
    check_equal(s[s > 1], np.asarray([5.], np.float32))


def test_setitem_cases():
    a = np.zeros((3, 4, 5))
    x = minidl.tensor(a)
    ops = [
        (np.s_[0], 1.),
        (np.s_[:, 1], np.arange(5.)),                      # broadcast along dim 0
        (np.s_[1:, ::-2, 0], np.array([[7.], [8.]])),
        (np.s_[..., -1], 9.),
        (np.s_[[0, 2], 1:3], np.array([1., 2., 3., 4., 5.])),
        (np.s_[[0, 2], :, [1, 3]], np.array([[6.], [7.]])),  # separated: (2,) first, then dim 1
        (np.s_[:, [0, 3], [4, 4]], -1.),
        (np.s_[None, 2, 3], 5.5),
    ]
    for idx, v in ops:
        t_idx = tuple(minidl.tensor(i) if isinstance(i, list) else i for i in idx) \
            if isinstance(idx, tuple) else idx
        x[t_idx] = minidl.tensor(v) if isinstance(v, np.ndarray) else v
        a[idx] = v
        np.testing.assert_array_equal(x.numpy(), a, err_msg=str(idx))
    m = a > 3
    x[minidl.tensor(m)] = 0.
    a[m] = 0.
    np.testing.assert_array_equal(x.numpy(), a)
    x[x < 0] = minidl.tensor(2.)
    a[a < 0] = 2.
    np.testing.assert_array_equal(x.numpy(), a)
    # masked assignment with a vector of values (one per selected element)
    sel = a == 2.
    vals = np.arange(sel.sum(), dtype=np.float64)
    x[minidl.tensor(sel)] = minidl.tensor(vals)
    a[sel] = vals
    np.testing.assert_array_equal(x.numpy(), a)
    # int tensor into float tensor and float value into int tensor (truncated), as PyTorch
    y = minidl.zeros(3, dtype=minidl.int64)
    y[0] = 2.7
    y[[1, 2]] = minidl.tensor([-1.5, 3.9])
    assert y.tolist() == [2, -1, 3]
    with pytest.raises(RuntimeError):
        x[0] = minidl.ones(2)                        # value can't broadcast to (4, 5)


def test_setitem_through_view_reaches_base():
    x = minidl.zeros(4, 4)
    v = x.t()[1:]
    v[[0, 2], 0] = 5.
    v[:, -1] = minidl.tensor([1., 2., 3.])
    e = np.zeros((4, 4))
    ev = e.T[1:]
    ev[[0, 2], 0] = 5.
    ev[:, -1] = [1., 2., 3.]
    np.testing.assert_array_equal(x.numpy(), e)
    x.index_put_((minidl.tensor([0, 0]), minidl.tensor([1, 1])), minidl.tensor([1., 2.]), accumulate=True)
    e[0, 1] += 3.
    np.testing.assert_array_equal(x.numpy(), e)


# ----------------------------------------------------------------------------- gather family
def np_gather(a, dim, idx):
    grid = list(np.indices(idx.shape, sparse=True))
    grid[dim] = idx
    return a[tuple(grid)]


def np_scatter(a, dim, idx, src, accumulate):
    out = a.copy()
    grid = list(np.indices(idx.shape, sparse=True))
    grid[dim] = idx
    grid = tuple(np.broadcast_to(g, idx.shape) for g in grid)
    vals = src[tuple(slice(0, n) for n in idx.shape)] if np.ndim(src) else np.broadcast_to(src, idx.shape)
    if accumulate:
        np.add.at(out, grid, vals)
    else:
        out[grid] = vals
    return out


@st.composite
def gather_case(draw, unique=False):
    x, a = draw(S.views(dtype=("float32", "int64", "float64"), min_dims=1, max_dims=3))
    nd = a.ndim
    dim = draw(st.integers(-nd, nd - 1))
    d = dim % nd
    n = a.shape[d]
    ishape = [draw(st.integers(0, m)) for m in a.shape]
    ishape[d] = draw(st.integers(0, 4)) if n else 0
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    if unique and n:
        ishape[d] = min(ishape[d], n)
        # per slice along dim: distinct targets (scatter without accumulation is then deterministic)
        perm = np.argsort(rng.random(tuple(ishape[:d]) + (n,) + tuple(ishape[d + 1:])), axis=d)
        idx = np.take(perm, np.arange(ishape[d]), axis=d)
    else:
        idx = rng.integers(0, max(n, 1), tuple(ishape)) if n else np.zeros(ishape, np.int64)
    if draw(st.booleans()) and n:
        idx = idx - n * (rng.random(idx.shape) < 0.3)     # negative indices wrap, as PyTorch
        idx = np.where(idx < -n, idx + n, idx)
    return x, a, dim, idx


def _wrap(idx, n):
    return np.where(idx < 0, idx + n, idx)


@given(gather_case())
def test_gather(case):
    x, a, dim, idx = case
    n = a.shape[dim]
    if (idx < 0).any():
        with pytest.raises(IndexError):       # gather takes no negative indices in PyTorch
            minidl.gather(x, dim, minidl.tensor(idx))
        idx = _wrap(idx, n)
    exp = np_gather(a, dim % a.ndim, idx)
    check_equal(x.gather(dim, minidl.tensor(idx)), exp, x.dtype)
    check_equal(minidl.gather(x, dim, minidl.tensor(idx, dtype=minidl.int32)), exp, x.dtype)


@given(gather_case(unique=True), st.booleans())
def test_scatter(case, scalar_src):
    x, a, dim, idx = case
    idx = _wrap(idx, a.shape[dim])
    d = dim % a.ndim
    src_shape = tuple(m + 1 for m in idx.shape)        # src may be bigger than the index
    src_np = np.arange(1, np.prod(src_shape) + 1).reshape(src_shape).astype(a.dtype)
    src = 7 if scalar_src else minidl.tensor(src_np)
    out = x.scatter(dim, minidl.tensor(idx), src) if not scalar_src else x.scatter(dim, minidl.tensor(idx), value=7)
    check_equal(out, np_scatter(a, d, idx, 7 if scalar_src else src_np, False), x.dtype)
    np.testing.assert_array_equal(x.numpy(), a)                 # out of place
    y = x.clone()
    y.scatter_(dim, minidl.tensor(idx), src)
    check_equal(y, np_scatter(a, d, idx, 7 if scalar_src else src_np, False), x.dtype)


@given(gather_case())
def test_scatter_add_and_index_add(case):
    x, a, dim, idx = case
    n = a.shape[dim]
    idx = _wrap(idx, n)
    d = dim % a.ndim
    src_np = S.fill_values(np.random.default_rng(1), idx.shape, a.dtype.name)
    out = x.scatter_add(dim, minidl.tensor(idx), minidl.tensor(src_np))
    exp = np_scatter(a.astype(np.float64) if a.dtype.kind == "f" else a, d, idx, src_np, True)
    np.testing.assert_allclose(out.numpy(), exp, rtol=1e-5, atol=1e-5)
    assert out.dtype is x.dtype
    check_equal(minidl.scatter(x, dim, minidl.tensor(idx), minidl.tensor(src_np), reduce="add"),
                out.numpy(), x.dtype)
    # index_add: a 1-D index along dim, source shaped like x except len(index) there
    k = idx.shape[d]
    index = idx.reshape(-1)[:k] if idx.size else np.zeros(0, np.int64)
    if index.size < k:
        return
    sshape = list(a.shape)
    sshape[d] = k
    source = S.fill_values(np.random.default_rng(2), tuple(sshape), a.dtype.name)
    exp = a.astype(np.float64) if a.dtype.kind == "f" else a.copy()
    for i, j in enumerate(index):
        sel_out = [slice(None)] * a.ndim
        sel_src = [slice(None)] * a.ndim
        sel_out[d], sel_src[d] = j, i
        exp[tuple(sel_out)] += source[tuple(sel_src)]
    got = x.index_add(dim, minidl.tensor(index), minidl.tensor(source))
    np.testing.assert_allclose(got.numpy(), exp, rtol=1e-5, atol=1e-5)
    got2 = minidl.index_add(x, dim, minidl.tensor(index), minidl.tensor(source), alpha=2)
    exp2 = a.astype(np.float64) if a.dtype.kind == "f" else a.copy()
    for i, j in enumerate(index):
        sel_out = [slice(None)] * a.ndim
        sel_src = [slice(None)] * a.ndim
        sel_out[d], sel_src[d] = j, i
        exp2[tuple(sel_out)] += 2 * source[tuple(sel_src)]
    np.testing.assert_allclose(got2.numpy(), exp2, rtol=1e-5, atol=1e-5)


@given(S.views(dtype=("float32", "int64", "bool"), min_dims=1), st.data())
def test_index_select(view, data):
    x, a = view
    dim = data.draw(st.integers(-a.ndim, a.ndim - 1))
    n = a.shape[dim]
    idx = np.asarray(data.draw(st.lists(st.integers(-n, n - 1), max_size=5) if n else st.just([])), np.int64)
    if (idx < 0).any():
        with pytest.raises(IndexError):
            x.index_select(dim, minidl.tensor(idx))
        idx = _wrap(idx, n)
    check_equal(x.index_select(dim, minidl.tensor(idx)), np.take(a, idx, axis=dim), x.dtype)
    check_equal(minidl.index_select(x, dim, minidl.tensor(idx, dtype=minidl.int32)), np.take(a, idx, axis=dim))
    if n:
        with pytest.raises(IndexError):
            x.index_select(dim, minidl.tensor([n]))


@given(S.broadcast_views([("float32", "int64"), "bool"]), st.sampled_from([0, -1.5, 3]))
def test_masked_fill_and_where(views, value):
    (x, a), (m, ma) = views
    exp = np.where(ma, np.asarray(value).astype(a.dtype), a)  # a mask may broadcast x up, as in PyTorch
    check_equal(x.masked_fill(m, value), exp, x.dtype)
    check_equal(minidl.masked_fill(x, m, minidl.tensor(value)), exp, x.dtype)
    if exp.shape != a.shape:  # but not in place
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            x.clone().masked_fill_(m, value)
        return
    y = x.clone()
    assert y.masked_fill_(m, value) is y
    check_equal(y, exp, x.dtype)
    with pytest.raises(TypeError):
        x.masked_fill(m.long(), value)


@given(S.broadcast_views([("float32", "int64", "bool"), "bool"]))
def test_masked_select(views):
    (x, a), (m, ma) = views
    shape = np.broadcast_shapes(a.shape, ma.shape)
    exp = np.broadcast_to(a, shape)[np.broadcast_to(ma, shape)]
    check_equal(x.masked_select(m), exp, x.dtype)
    check_equal(minidl.masked_select(x, m), exp, x.dtype)


@given(S.views(dtype=("float32", "int64", "bool")))
def test_nonzero(view):
    x, a = view
    check_equal(x.nonzero(), np.argwhere(a), minidl.int64)
    check_equal(minidl.nonzero(x), np.argwhere(a), minidl.int64)
    if a.ndim:
        got = x.nonzero(as_tuple=True)
        exp = np.nonzero(a)
        assert len(got) == len(exp)
        for g, e in zip(got, exp):
            check_equal(g, e, minidl.int64)
        got = minidl.where(x != 0)
        for g, e in zip(got, exp):
            check_equal(g, e, minidl.int64)
        # nonzero's tuple indexes back exactly the nonzero elements
        check_equal(x[x.nonzero(as_tuple=True)], a[np.nonzero(a)], x.dtype)


def test_take_and_gather_errors():
    x = minidl.arange(6.).reshape(2, 3)
    check_equal(x.take(minidl.tensor([[0, 5], [-1, 2]])), np.take(np.arange(6.), [[0, 5], [-1, 2]]))
    with pytest.raises(IndexError):
        x.take(minidl.tensor([6]))
    with pytest.raises(IndexError):
        x.gather(1, minidl.tensor([[3]]))
    with pytest.raises(IndexError):
        x.gather(0, minidl.tensor([[2, 0, 0]]))
    with pytest.raises(RuntimeError):
        x.gather(1, minidl.tensor([0, 1]))                 # wrong number of dims
    with pytest.raises(TypeError):
        x.gather(1, minidl.tensor([[0.]]))
    with pytest.raises(IndexError):
        x.scatter(1, minidl.tensor([[3]]), 1.)
    with pytest.raises(IndexError):
        x.scatter_add(0, minidl.tensor([[0, -3, 0]]), minidl.ones(1, 3))
    with pytest.raises(IndexError):
        x.index_add(0, minidl.tensor([2]), minidl.ones(1, 3))
    with pytest.raises(TypeError):
        x.index_select(0, minidl.tensor([0.]))
    with pytest.raises(IndexError):
        x.index_select(1, minidl.tensor([-4]))
    np.testing.assert_array_equal(x.numpy(), np.arange(6.).reshape(2, 3))
