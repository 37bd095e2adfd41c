"""Views: never a copy, strides/offset/contiguity right, writes go through to the base.

numpy is the oracle: every generated view chain is built on a numpy array in
parallel (tests/strategies.py), and replaying the chain on the base's flat
element ids tells exactly which base element each view element must show.
"""

import numpy as np
import pytest
import strategies as S
from hypothesis import given
from hypothesis import strategies as st

import minidl
from minidl.layout import view_strides

EXPANDING = S.VIEW_KINDS                                   # may produce zero strides (aliasing)
NON_ALIASING = tuple(k for k in S.VIEW_KINDS if k != "expand")


def np_elem_strides(a: np.ndarray):
    return tuple(s // a.itemsize for s in a.strides)


def positions(t) -> np.ndarray:
    """Buffer position of every element of t, from its stride()/storage_offset() (numpy-free math)."""
    pos = np.full(tuple(t.shape), t.storage_offset(), dtype=np.int64)
    for d, (n, s) in enumerate(zip(t.shape, t.stride())):
        shape = [1] * t.ndim
        shape[d] = n
        pos = pos + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return pos


def shares(x: np.ndarray, y: np.ndarray) -> bool:
    return np.shares_memory(x, y, max_work=10 ** 6)


# ----------------------------------------------------------------------------- the property
@given(S.view_cases())
def test_generated_views_match_numpy_and_share_storage(case):
    t, a = case.t, case.a
    assert tuple(t.shape) == a.shape
    assert t.dtype is S.MINIDL_DTYPES[a.dtype.name if a.dtype != np.bool_ else "bool"]
    assert t.ndim == a.ndim and t.numel() == a.size
    got = t.numpy()
    assert got.dtype == a.dtype
    assert np.array_equal(got, a)
    assert np.array_equal(t.contiguous().numpy(), a)
    assert np.array_equal(np.asarray(t), a)
    # a view never copies: same storage as the base, numpy() is a window on it
    assert t.untyped_storage_id() == case.base_t.untyped_storage_id()
    if a.size:
        assert shares(got, case.base_t.numpy())
    # every element sits at the base element the numpy chain says (strides in elements, any sign)
    ids = case.ids()
    if a.size:
        assert np.array_equal(positions(t), ids)


@given(S.view_cases())
def test_generated_view_strides_offset_contiguity(case):
    t, a = case.t, case.a
    st_np = np_elem_strides(a)
    assert len(t.stride()) == t.ndim
    for d in range(a.ndim):
        assert t.stride(d) == t.stride()[d]
        if a.shape[d] > 1 and a.size:   # strides of size-1 dims and of empty tensors are free
            assert t.stride(d) == st_np[d], (d, t.stride(), st_np)
    if a.size:
        base_ptr = case.base_a.__array_interface__["data"][0]
        assert t.storage_offset() == (a.__array_interface__["data"][0] - base_ptr) // a.itemsize
    assert t.is_contiguous() == a.flags.c_contiguous
    c = t.contiguous()
    assert c.is_contiguous()
    if a.flags.c_contiguous:
        assert c.untyped_storage_id() == t.untyped_storage_id()
    else:
        assert c.untyped_storage_id() != t.untyped_storage_id()
        assert [c.stride(d) for d in range(c.ndim) if c.shape[d] > 1] == \
            [s for d, s in enumerate(np_elem_strides(np.ascontiguousarray(a))) if a.shape[d] > 1]
    assert np.array_equal(c.numpy(), a)


@given(S.view_cases(kinds=EXPANDING, dtype=("float32", "int64")), st.integers(-5, 5))
def test_fill_through_generated_view_reaches_base(case, value):
    expected = case.base_a.copy()
    expected.reshape(-1)[case.ids().reshape(-1)] = value
    out = case.t.fill_(value)
    assert out is case.t
    assert np.array_equal(case.base_t.numpy(), expected)


@given(S.view_cases(kinds=NON_ALIASING, dtype=("float32", "float64", "int64")), st.data())
def test_inplace_arithmetic_through_generated_view(case, data):
    ids = case.ids().reshape(-1)
    other = S.fill_values(np.random.default_rng(data.draw(st.integers(0, 99))), case.a.shape,
                          case.a.dtype.name)
    op = data.draw(st.sampled_from(["add_", "sub_", "mul_", "copy_", "setitem", "zero_", "clamp_"]))
    expected = case.base_a.copy()
    flat = expected.reshape(-1)
    o = other.reshape(-1)
    if op == "add_":
        flat[ids] = flat[ids] + o
        case.t.add_(minidl.tensor(other))
    elif op == "sub_":
        flat[ids] = flat[ids] - o
        case.t.sub_(minidl.tensor(other))
    elif op == "mul_":
        flat[ids] = flat[ids] * o
        case.t.mul_(minidl.tensor(other))
    elif op == "copy_":
        flat[ids] = o
        case.t.copy_(minidl.tensor(other))
    elif op == "setitem":
        flat[ids] = o
        case.t[...] = minidl.tensor(other)
    elif op == "clamp_":
        flat[ids] = np.clip(flat[ids], -1, 2)
        assert case.t.clamp_(-1, 2) is case.t
    else:
        flat[ids] = 0
        case.t.zero_()
    assert np.array_equal(case.base_t.numpy(), expected)
    assert np.array_equal(case.t.numpy(), expected.reshape(-1)[case.ids()])


@given(S.view_cases(kinds=S.VIEW_KINDS + ("reshape",), dtype="float32"), st.data())
def test_view_possible_exactly_when_numpy_reshape_needs_no_copy(case, data):
    t, a = case.t, case.a
    numel = a.size
    if numel == 0:
        return
    divisors = [k for k in range(1, numel + 1) if numel % k == 0]
    k = data.draw(st.sampled_from(divisors))
    m = data.draw(st.sampled_from([k2 for k2 in divisors if (numel // k) % k2 == 0]))
    shape = (k, m, numel // k // m)
    np_res = a.reshape(shape)
    np_is_view = shares(np_res, a)
    if np_is_view:
        v = t.view(shape)
        assert v.untyped_storage_id() == t.untyped_storage_id()
        assert np.array_equal(v.numpy(), np_res)
        if t.untyped_storage_id() == case.base_t.untyped_storage_id():    # (no copying reshape in the chain)
            assert np.array_equal(positions(v), case.ids().reshape(shape))
    else:
        with pytest.raises(RuntimeError):
            t.view(shape)
    assert (view_strides(t._layout, shape) is not None) == np_is_view
    r = t.reshape(shape)
    assert np.array_equal(r.numpy(), np_res)
    assert (r.untyped_storage_id() == t.untyped_storage_id()) == np_is_view


# ----------------------------------------------------------------------------- view / reshape rules
def test_view_of_transpose_raises_but_reshape_copies():
    x = minidl.arange(6.).reshape(2, 3)
    xt = x.t()
    with pytest.raises(RuntimeError):
        xt.view(-1)
    r = xt.reshape(-1)
    assert r.untyped_storage_id() != x.untyped_storage_id()
    assert r.tolist() == [0., 3., 1., 4., 2., 5.]
    # a contiguous reshape is a view
    v = x.reshape(3, 2)
    assert v.untyped_storage_id() == x.untyped_storage_id()
    v2 = x.view(-1)
    v2[0] = 42.
    assert x[0, 0].item() == 42.


def test_view_shapes_and_inference():
    x = minidl.arange(24).reshape(2, 3, 4)
    assert x.view(4, -1).shape == (4, 6)
    assert x.view((4, 6)).shape == (4, 6)
    assert x.view([2, 12]).shape == (2, 12)
    assert x.view(-1).shape == (24,)
    assert x.view(2, 3, 4, 1).stride() == (12, 4, 1, 1)
    with pytest.raises(RuntimeError):
        x.view(5, -1)
    with pytest.raises(RuntimeError):
        x.view(-1, -1)
    with pytest.raises(RuntimeError):
        x.view(7)
    # size-1 dims never block a view
    y = minidl.arange(6.).reshape(3, 1, 2).permute(1, 0, 2)
    assert y.view(6).untyped_storage_id() == y.untyped_storage_id()
    # a transposed tensor can still be viewed by splitting a dim
    z = minidl.arange(12.).reshape(3, 4).t()                # shape (4, 3), strides (1, 4)
    w = z.view(2, 2, 3)
    assert w.stride() == (2, 1, 4)
    np.testing.assert_array_equal(w.numpy(), np.arange(12.).reshape(3, 4).T.reshape(2, 2, 3))
    # zero-size tensors can always be viewed
    e = minidl.zeros(0, 3).t()
    assert e.view(3, 0, 1).shape == (3, 0, 1)
    assert e.view(-1, 3).shape == (0, 3)


def test_view_of_negative_stride_tensor():
    x = minidl.arange(12).reshape(3, 4)
    r = x[::-1]
    assert r.stride() == (-4, 1) and r.storage_offset() == 8
    # merging the two dims of a reversed-rows tensor is impossible, splitting the last one is fine
    with pytest.raises(RuntimeError):
        r.view(12)
    v = r.view(3, 2, 2)
    assert v.stride() == (-4, 2, 1)
    np.testing.assert_array_equal(v.numpy(), np.arange(12).reshape(3, 4)[::-1].reshape(3, 2, 2))
    # fully reversed 1-D: view keeps the negative stride
    f = minidl.arange(6)[::-1]
    g = f.view(2, 3)
    assert g.stride() == (-3, -1) and g.storage_offset() == 5
    assert g.tolist() == [[5, 4, 3], [2, 1, 0]]


def test_reshape_of_expanded_copies_only_when_needed():
    x = minidl.arange(3.).reshape(3, 1).expand(3, 4)       # strides (1, 0)
    assert x.stride() == (1, 0)
    a = x.reshape(3, 2, 2)                                  # splitting the broadcast dim: view
    assert a.untyped_storage_id() == x.untyped_storage_id()
    assert a.stride() == (1, 0, 0)
    b = x.reshape(12)                                       # merging: copy
    assert b.untyped_storage_id() != x.untyped_storage_id()
    np.testing.assert_array_equal(b.numpy(), np.repeat(np.arange(3.), 4))


# ----------------------------------------------------------------------------- individual views
def test_transpose_permute_t_mT_T():
    a = np.arange(24.).reshape(2, 3, 4)
    x = minidl.tensor(a)
    for d0, d1 in [(0, 1), (0, 2), (1, 2), (-1, 0), (-2, -1), (1, 1)]:
        y = x.transpose(d0, d1)
        np.testing.assert_array_equal(y.numpy(), np.swapaxes(a, d0, d1))
        assert y.stride() == np_elem_strides(np.swapaxes(a, d0, d1))
        assert y.untyped_storage_id() == x.untyped_storage_id()
    np.testing.assert_array_equal(minidl.transpose(x, 0, 2).numpy(), np.swapaxes(a, 0, 2))
    np.testing.assert_array_equal(x.swapaxes(0, 1).numpy(), np.swapaxes(a, 0, 1))
    for perm in [(2, 0, 1), (1, 2, 0), (0, 1, 2), (-1, 0, 1)]:
        np.testing.assert_array_equal(x.permute(*perm).numpy(), np.transpose(a, perm))
        np.testing.assert_array_equal(x.permute(perm).numpy(), np.transpose(a, perm))
        np.testing.assert_array_equal(minidl.permute(x, perm).numpy(), np.transpose(a, perm))
    np.testing.assert_array_equal(x.mT.numpy(), np.swapaxes(a, -1, -2))
    np.testing.assert_array_equal(x.T.numpy(), a.T)
    assert x.T.stride() == (1, 4, 12)
    m = minidl.tensor(a[0])
    np.testing.assert_array_equal(m.t().numpy(), a[0].T)
    assert m.t().stride() == (1, 4)
    v = minidl.tensor([1., 2.])
    assert v.t().shape == (2,) and v.T.shape == (2,)
    s = minidl.tensor(3.)
    assert s.t().shape == () and s.T.shape == ()
    with pytest.raises(RuntimeError):
        x.t()
    with pytest.raises((RuntimeError, IndexError)):
        x.permute(0, 1)
    with pytest.raises((RuntimeError, IndexError)):
        x.permute(0, 0, 1)
    with pytest.raises(IndexError):
        x.transpose(0, 3)
    np.testing.assert_array_equal(x.movedim(0, -1).numpy(), np.moveaxis(a, 0, -1))
    np.testing.assert_array_equal(x.movedim((0, 1), (2, 0)).numpy(), np.moveaxis(a, (0, 1), (2, 0)))


def test_expand():
    a = np.arange(3.).reshape(3, 1)
    x = minidl.tensor(a)
    y = x.expand(2, 3, 4)
    assert y.shape == (2, 3, 4) and y.stride() == (0, 1, 0)
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(a, (2, 3, 4)))
    assert y.untyped_storage_id() == x.untyped_storage_id()
    assert not y.is_contiguous()
    assert x.expand(-1, 5).shape == (3, 5)
    assert x.expand((3, 2)).shape == (3, 2)
    assert x.expand(3, 0).shape == (3, 0)
    assert minidl.tensor(7).expand(2, 2).tolist() == [[7, 7], [7, 7]]
    assert minidl.expand(x, (3, 2)).shape == (3, 2)
    with pytest.raises(RuntimeError):
        x.expand(4, 4)            # non-singleton dim 3 -> 4
    with pytest.raises(RuntimeError):
        x.expand(4)               # fewer dims than the tensor
    with pytest.raises(RuntimeError):
        x.expand(-1, 3, 4)        # -1 in a new leading dim
    # expanded views read the base; writes into the base show up in every broadcast copy
    x[1, 0] = 10.
    assert y[1, 1].tolist() == [10.] * 4
    # a copy of an expanded view is packed and independent
    c = y.contiguous()
    assert c.stride() == (12, 4, 1)
    x[0, 0] = -1.
    assert c[0, 0, 0].item() == 0.


def test_expand_as_broadcast_to_view_as():
    a = np.arange(3.).reshape(3, 1)
    x = minidl.tensor(a)
    y = x.expand_as(minidl.zeros(2, 3, 4))
    assert y.stride() == (0, 1, 0) and y.untyped_storage_id() == x.untyped_storage_id()
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(a, (2, 3, 4)))
    for b in (minidl.broadcast_to(x, (3, 5)), x.broadcast_to((3, 5))):
        assert b.stride() == (1, 0) and b.untyped_storage_id() == x.untyped_storage_id()
        np.testing.assert_array_equal(b.numpy(), np.broadcast_to(a, (3, 5)))
    p, q = minidl.broadcast_tensors(x, minidl.arange(4.))
    np.testing.assert_array_equal(p.numpy(), np.broadcast_to(a, (3, 4)))
    np.testing.assert_array_equal(q.numpy(), np.broadcast_to(np.arange(4.), (3, 4)))
    assert p.untyped_storage_id() == x.untyped_storage_id()
    with pytest.raises(RuntimeError):
        minidl.broadcast_tensors(x, minidl.zeros(2, 1, 2)[:, :, :1].expand(2, 2, 1))
    v = x.view_as(minidl.zeros(1, 3))
    assert v.shape == (1, 3) and v.untyped_storage_id() == x.untyped_storage_id()
    r = x.t().reshape_as(minidl.zeros(3))
    assert r.shape == (3,) and r.tolist() == [0., 1., 2.]


def test_slicing_negative_steps():
    a = np.arange(60).reshape(3, 4, 5)
    x = minidl.tensor(a)
    cases = [np.s_[::-1], np.s_[::-2], np.s_[2::-1], np.s_[:, ::-1, 1:4], np.s_[1:, -1:0:-2, ::-3],
             np.s_[..., ::-1], np.s_[-1:-4:-1, :, 4:0:-1], np.s_[5:1:-1], np.s_[:, 10:-10:-1],
             np.s_[0:0:-1], np.s_[::3, ::-5, ::7], np.s_[-100:100:2]]
    for idx in cases:
        y, b = x[idx], a[idx]
        np.testing.assert_array_equal(y.numpy(), b, err_msg=str(idx))
        for d in range(b.ndim):
            if b.shape[d] > 1:
                assert y.stride(d) == b.strides[d] // b.itemsize, idx
        if b.size:
            assert y.storage_offset() == (b.__array_interface__["data"][0] - a.__array_interface__["data"][0]) // 8
        assert y.untyped_storage_id() == x.untyped_storage_id()
    r = x[::-1, :, ::-1]
    assert r.stride() == (-20, 5, -1) and r.storage_offset() == 2 * 20 + 4
    # reversed views compose back to the original layout
    rr = r[::-1, :, ::-1]
    assert rr.stride() == (20, 5, 1) and rr.storage_offset() == 0 and rr.is_contiguous()
    with pytest.raises(ValueError):
        x[::0]


def test_select_and_integer_indexing_are_views():
    a = np.arange(24.).reshape(2, 3, 4)
    x = minidl.tensor(a)
    for idx in [0, 1, -1, -2, (0, 1), (-1, -1, -1), (slice(None), 2), (Ellipsis, 3), (1, Ellipsis, -4)]:
        y = x[idx]
        np.testing.assert_array_equal(np.asarray(y.numpy()), a[idx])
        assert y.untyped_storage_id() == x.untyped_storage_id()
    assert x[1, 2, 3].shape == () and x[1, 2, 3].item() == 23.
    assert x[1, 2, 3].storage_offset() == 23
    with pytest.raises(IndexError):
        x[2]
    with pytest.raises(IndexError):
        x[0, -4]
    u = x.unbind(1)
    assert len(u) == 3 and all(v.untyped_storage_id() == x.untyped_storage_id() for v in u)
    np.testing.assert_array_equal(u[2].numpy(), a[:, 2])


def test_squeeze_unsqueeze_flatten_unflatten():
    a = np.arange(6.).reshape(1, 2, 1, 3)
    x = minidl.tensor(a)
    assert x.squeeze().shape == (2, 3)
    assert x.squeeze(0).shape == (2, 1, 3)
    assert x.squeeze(1).shape == (1, 2, 1, 3)      # not size 1: unchanged
    assert x.squeeze(-2).shape == (1, 2, 3)
    assert x.squeeze((0, 2)).shape == (2, 3)
    assert minidl.squeeze(x, 0).shape == (2, 1, 3)
    for y in (x.squeeze(), x.unsqueeze(0), x.unsqueeze(-1), x.unsqueeze(2), x.flatten(), x.flatten(1, 2)):
        assert y.untyped_storage_id() == x.untyped_storage_id()
    assert x.unsqueeze(0).shape == (1, 1, 2, 1, 3)
    assert x.unsqueeze(-1).shape == (1, 2, 1, 3, 1)
    assert x.unsqueeze(4).shape == (1, 2, 1, 3, 1)
    assert x.unsqueeze(-5).shape == (1, 1, 2, 1, 3)
    with pytest.raises(IndexError):
        x.unsqueeze(5)
    np.testing.assert_array_equal(x.squeeze().numpy(), np.squeeze(a))
    assert minidl.tensor(5.).unsqueeze(0).shape == (1,)
    assert minidl.tensor([5.]).squeeze().shape == ()
    assert minidl.tensor(5.).squeeze().shape == ()
    # flatten / unflatten
    b = np.arange(24).reshape(2, 3, 4)
    y = minidl.tensor(b)
    assert y.flatten().shape == (24,)
    assert y.flatten(1).shape == (2, 12)
    assert y.flatten(0, 1).shape == (6, 4)
    assert y.flatten(-2, -1).shape == (2, 12)
    assert minidl.flatten(y, 1, 1).shape == (2, 3, 4)
    assert minidl.tensor(3).flatten().shape == (1,)
    np.testing.assert_array_equal(y.flatten(1).numpy(), b.reshape(2, 12))
    with pytest.raises(RuntimeError):
        y.flatten(2, 1)
    u = y.unflatten(2, (2, 2))
    assert u.shape == (2, 3, 2, 2) and u.untyped_storage_id() == y.untyped_storage_id()
    np.testing.assert_array_equal(u.numpy(), b.reshape(2, 3, 2, 2))
    assert y.unflatten(-1, (-1, 2)).shape == (2, 3, 2, 2)
    assert y.unflatten(0, (1, 2)).shape == (1, 2, 3, 4)
    with pytest.raises(RuntimeError):
        y.unflatten(1, (2, 2))
    # flatten of a non-viewable tensor copies, with the right values
    f = y.transpose(0, 2).flatten()
    np.testing.assert_array_equal(f.numpy(), b.transpose(2, 1, 0).reshape(-1))


def test_narrow():
    a = np.arange(20.).reshape(4, 5)
    x = minidl.tensor(a)
    y = x.narrow(1, 1, 3)
    np.testing.assert_array_equal(y.numpy(), a[:, 1:4])
    assert y.storage_offset() == 1 and y.stride() == (5, 1)
    assert y.untyped_storage_id() == x.untyped_storage_id()
    np.testing.assert_array_equal(x.narrow(0, -2, 2).numpy(), a[2:4])
    np.testing.assert_array_equal(x.narrow(-1, 0, 0).numpy(), a[:, 0:0])
    np.testing.assert_array_equal(minidl.narrow(x, 0, 4, 0).numpy(), a[4:4])
    np.testing.assert_array_equal(x[::-1].narrow(0, 1, 2).numpy(), a[::-1][1:3])
    with pytest.raises((IndexError, RuntimeError)):
        x.narrow(0, 3, 2)
    with pytest.raises((IndexError, RuntimeError)):
        x.narrow(1, 0, 6)
    with pytest.raises(IndexError):
        x.narrow(2, 0, 1)


def test_diagonal():
    a = np.arange(60.).reshape(3, 4, 5)
    x = minidl.tensor(a)
    for off in range(-4, 6):
        for d1, d2 in [(0, 1), (1, 0), (0, 2), (2, 1), (-1, -2), (-3, 2)]:
            y = x.diagonal(off, d1, d2)
            b = np.diagonal(a, off, d1, d2)
            np.testing.assert_array_equal(y.numpy(), b, err_msg=f"{off} {d1} {d2}")
            assert y.untyped_storage_id() == x.untyped_storage_id()
            if b.size:
                assert y.storage_offset() == (b.__array_interface__["data"][0] -
                                              a.__array_interface__["data"][0]) // 8
    m = minidl.tensor(a[0])
    np.testing.assert_array_equal(m.diagonal().numpy(), np.diagonal(a[0]))
    np.testing.assert_array_equal(minidl.diagonal(m, 1).numpy(), np.diagonal(a[0], 1))
    np.testing.assert_array_equal(m.diagonal(offset=-1).numpy(), np.diagonal(a[0], -1))
    np.testing.assert_array_equal(m.diagonal(dim1=1, dim2=0).numpy(), np.diagonal(a[0], 0, 1, 0))
    assert m.diagonal().stride() == (6,)
    # diagonal of a view of a diagonal: still the same storage
    d = x.diagonal(0, 0, 2).diagonal()
    np.testing.assert_array_equal(d.numpy(), np.diagonal(np.diagonal(a, 0, 0, 2)))
    with pytest.raises(RuntimeError):
        x.diagonal(0, 1, 1)
    # writes through a diagonal reach the base
    e = minidl.zeros(3, 3)
    e.diagonal().fill_(1.)
    np.testing.assert_array_equal(e.numpy(), np.eye(3))
    e.diagonal(1).add_(2.)
    np.testing.assert_array_equal(e.numpy(), np.eye(3) + 2 * np.eye(3, k=1))


def test_as_strided():
    x = minidl.arange(10.)
    y = x.as_strided((3, 3), (1, 2), 1)
    np.testing.assert_array_equal(y.numpy(), np.lib.stride_tricks.as_strided(
        np.arange(10.)[1:], (3, 3), (8, 16)))
    assert y.untyped_storage_id() == x.untyped_storage_id()
    with pytest.raises(RuntimeError):
        x.as_strided((3, 4), (4, 1))


def test_contiguous():
    x = minidl.arange(12.).reshape(3, 4)
    assert x.is_contiguous() and x.contiguous() is x
    y = x.t()
    assert not y.is_contiguous()
    c = y.contiguous()
    assert c.is_contiguous() and c.stride() == (3, 1) and c.storage_offset() == 0
    assert c.untyped_storage_id() != x.untyped_storage_id()
    np.testing.assert_array_equal(c.numpy(), np.arange(12.).reshape(3, 4).T)
    # size-1 dims do not matter; slicing the outer dim keeps contiguity
    assert x[1:].is_contiguous() and x[1:2, :].is_contiguous() and x[1:2].t().is_contiguous()
    assert not x[:, 1:2].t().is_contiguous()
    assert x.unsqueeze(1).is_contiguous()
    assert not x[:, 1:].is_contiguous() and not x[::-1].is_contiguous() and not x[:, ::2].is_contiguous()
    # zero-size tensors are contiguous whatever their strides (as in PyTorch and numpy)
    assert minidl.zeros(0, 3).t().is_contiguous()
    assert minidl.zeros(3, 4)[:, 2:2].is_contiguous()
    assert minidl.contiguous(y).is_contiguous()
    cl = x.clone()
    assert cl.untyped_storage_id() != x.untyped_storage_id()
    np.testing.assert_array_equal(cl.numpy(), x.numpy())


def test_numpy_shares_memory_and_writes_both_ways():
    x = minidl.zeros(3, 4)
    a = x.numpy()
    a[1, 2] = 5.
    assert x[1, 2].item() == 5.
    x[0, 0] = 7.
    assert a[0, 0] == 7.
    t = x.t()
    at = t.numpy()
    assert at.strides == (4, 16)
    assert shares(at, a)
    r = x[::-1, ::-2]
    ar = r.numpy()
    assert ar.strides == (-16, -8)
    np.testing.assert_array_equal(ar, a[::-1, ::-2])
    ar[0, 0] = -3.
    assert x[2, 3].item() == -3.


# ----------------------------------------------------------------------------- in-place through views
def test_inplace_ops_write_through_views():
    a = np.arange(24.).reshape(4, 6)
    x = minidl.tensor(a)
    exp = a.copy()
    x[1:3, ::2].add_(100.)
    exp[1:3, ::2] += 100.
    x.t()[::-1].mul_(2.)
    exp.T[::-1] *= 2.
    x[:, 4].fill_(-1.)
    exp[:, 4] = -1.
    x[3].zero_()
    exp[3] = 0.
    with pytest.raises(RuntimeError):
        x.diagonal(1).copy_(minidl.tensor([9., 8., 7., 6., 5.]))   # 4 elements, 5 values
    x.diagonal(1).copy_(minidl.tensor([9., 8., 7., 6.]))
    for i, v in enumerate([9., 8., 7., 6.]):
        exp[i, i + 1] = v
    x[::-2, 1:].clamp_(min=0., max=50.)
    exp[::-2, 1:] = np.clip(exp[::-2, 1:], 0., 50.)
    x[0, ::-1].sub_(minidl.arange(6.))
    exp[0, ::-1] -= np.arange(6.)
    x[2, :3] = minidl.tensor([1., 2., 3.])
    exp[2, :3] = [1., 2., 3.]
    x[:, -1] = 0.5
    exp[:, -1] = 0.5
    x[1:3, 1:3] = minidl.tensor([11., 12.])     # broadcast value
    exp[1:3, 1:3] = [11., 12.]
    x[..., 0] += 1.
    exp[..., 0] += 1.
    x[0] *= 3
    exp[0] *= 3
    np.testing.assert_array_equal(x.numpy(), exp)


def test_inplace_op_returns_self_and_keeps_dtype():
    x = minidl.arange(6).reshape(2, 3)
    v = x[:, 1]
    assert v.add_(1) is v and v.mul_(2) is v and v.fill_(3) is v and v.zero_() is v
    assert v.clamp_(min=1) is v and v.copy_(minidl.tensor([5, 6])) is v
    assert x.dtype is minidl.int64
    np.testing.assert_array_equal(x.numpy(), [[0, 5, 2], [3, 6, 5]])
    with pytest.raises(RuntimeError):
        x.add_(1.5)       # float result can't be stored in an int tensor
    with pytest.raises(RuntimeError):
        x[0].add_(minidl.ones(2, 3, dtype=minidl.int64))   # can't broadcast the target
    y = minidl.zeros(3)
    y.add_(minidl.tensor([1, 2, 3]))                          # int into float: fine
    assert y.tolist() == [1., 2., 3.]
    y.add_(minidl.tensor([1., 1., 1.]), alpha=2)
    assert y.tolist() == [3., 4., 5.]
    y.copy_(minidl.tensor([1, 0, 1]))
    assert y.tolist() == [1., 0., 1.]


def test_copy_into_self_overlapping_view():
    # the source and the destination overlap: result must be as if the source was read first
    x = minidl.arange(6.)
    x[1:].copy_(x[:-1].clone())
    assert x.tolist() == [0., 0., 1., 2., 3., 4.]
    y = minidl.arange(6.)
    y.add_(y.flip(0))
    assert y.tolist() == [5.] * 6
    z = minidl.arange(6.)
    z[::-1].add_(z)
    assert z.tolist() == [5.] * 6
    w = minidl.arange(4.).reshape(2, 2)
    w.add_(w.t())
    assert w.tolist() == [[0., 3.], [3., 6.]]
