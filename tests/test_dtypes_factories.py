"""dtypes, PyTorch's type promotion, tensor factories, random numbers and numpy interop."""
import operator
import re

import numpy as np
import pytest
import strategies as S
from hypothesis import given

import minidl

DTYPES = {
    "float32": (minidl.float32, np.float32, 4, True),
    "float64": (minidl.float64, np.float64, 8, True),
    "float16": (minidl.float16, np.float16, 2, True),
    "int32": (minidl.int32, np.int32, 4, False),
    "int64": (minidl.int64, np.int64, 8, False),
    "bool": (minidl.bool, np.bool_, 1, False),
}


# ----------------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("name", sorted(DTYPES))
def test_dtype_storage_and_properties(name):
    dtype, np_dtype, size, is_float = DTYPES[name]
    data = [1, 0, 1] if name == "bool" else [1, -2, 3]
    t = minidl.tensor(data, dtype=dtype)
    assert t.dtype is dtype
    assert t.element_size() == size and t.dtype.itemsize == size
    assert t.is_floating_point() == is_float and dtype.is_floating_point == is_float
    assert t.numpy().dtype == np_dtype
    np.testing.assert_array_equal(t.numpy(), np.array(data, dtype=np_dtype))
    assert repr(dtype) == f"minidl.{name}"
    assert minidl.zeros(2, dtype=dtype).dtype is dtype
    assert minidl.from_numpy(np.zeros(2, np_dtype)).dtype is dtype


def test_dtype_aliases_and_default():
    assert minidl.get_default_dtype() is minidl.float32
    assert minidl.float is minidl.float32 and minidl.double is minidl.float64 and minidl.half is minidl.float16
    assert minidl.long is minidl.int64 and minidl.int is minidl.int32
    assert minidl.tensor([1.5]).dtype is minidl.float32
    assert minidl.tensor([1]).dtype is minidl.int64
    assert minidl.tensor([True]).dtype is minidl.bool
    assert minidl.tensor([1, 2.5]).dtype is minidl.float32          # mixed list: float
    assert minidl.tensor(np.array([1.5])).dtype is minidl.float64    # numpy keeps its dtype
    assert minidl.tensor(np.array([1], np.int32)).dtype is minidl.int32
    assert minidl.zeros(2).dtype is minidl.float32 and minidl.rand(2).dtype is minidl.float32
    try:
        minidl.set_default_dtype(minidl.float64)
        assert minidl.tensor([1.5]).dtype is minidl.float64
        assert minidl.ones(1).dtype is minidl.float64
        assert (minidl.tensor([1]) * 0.5).dtype is minidl.float64
    finally:
        minidl.set_default_dtype(minidl.float32)
    with pytest.raises(TypeError):
        minidl.set_default_dtype(minidl.int64)
    assert minidl.get_default_dtype() is minidl.float32


def test_float16_is_stored_as_half_and_computed_in_float32():
    a = np.array([0.1, 1000.5, 3.14159, -2.5e-3], dtype=np.float16)
    h = minidl.tensor(a)
    assert h.dtype is minidl.float16 and h.numpy().dtype == np.float16
    np.testing.assert_array_equal(h.numpy(), a)
    s = h + h
    assert s.dtype is minidl.float16
    # computed in float32, rounded once to half: exactly numpy's float32 result cast to float16
    np.testing.assert_array_equal(s.numpy(), (a.astype(np.float32) * 2).astype(np.float16))
    m = h * minidl.tensor([3.], dtype=minidl.float16)
    np.testing.assert_array_equal(m.numpy(), (a.astype(np.float32) * 3).astype(np.float16))
    e = h.exp()
    np.testing.assert_array_equal(np.isinf(e.numpy()), [False, True, False, False])   # overflows in half
    assert h.sum().dtype is minidl.float16
    np.testing.assert_allclose(float(h.sum()), float(a.astype(np.float32).sum()), rtol=1e-3)
    assert (h + minidl.tensor([1.], dtype=minidl.float32)).dtype is minidl.float32
    assert h.float().dtype is minidl.float32 and h.half() is h
    np.testing.assert_array_equal(minidl.tensor([0.1]).half().numpy(), np.array([0.1], np.float16))


def test_int32_stays_int32():
    x = minidl.tensor([1, -2, 3], dtype=minidl.int32)
    for out in (x + 1, x * 2, -x, x.abs(), x // 2, x % 2, x - x, minidl.maximum(x, x), x.clamp(0, 2)):
        assert out.dtype is minidl.int32
    assert (x + 1).tolist() == [2, -1, 4]
    assert x.sum().dtype is minidl.int64 and x.sum().item() == 2          # sums accumulate in int64
    assert x.cumsum(0).dtype is minidl.int64
    assert x.amax().dtype is minidl.int32 and x.argmax().dtype is minidl.int64
    big = minidl.tensor([2 ** 31 - 1], dtype=minidl.int32)
    assert (big + 1).item() == -(2 ** 31)                                   # wraps like int32
    assert (x > 0).dtype is minidl.bool


# ----------------------------------------------------------------------------- promotion
def _operand(spec):
    kind, v = spec
    if kind == "t":       # a 1-D tensor of that dtype
        return minidl.ones(2, dtype=v)
    if kind == "0d":      # a 0-d tensor of that dtype
        return minidl.ones((), dtype=v)
    return v              # a Python scalar


f16, f32, f64 = minidl.float16, minidl.float32, minidl.float64
i32, i64, b8 = minidl.int32, minidl.int64, minidl.bool

# (lhs, rhs, result of +, -, *) -- PyTorch's documented rules, written out by hand
PROMOTION = [
    (("t", i64), ("s", 2.5), f32),           # int tensor with a Python float: default float
    (("t", i32), ("s", 2.5), f32),
    (("t", b8), ("s", 2.5), f32),
    (("t", f64), ("s", 2.5), f64),           # a float scalar never widens a float tensor
    (("t", f16), ("s", 2.5), f16),
    (("t", f32), ("t", f64), f64),           # two tensors with dims: the wider wins
    (("t", f16), ("t", f32), f32),
    (("t", i32), ("t", i64), i64),
    (("t", i32), ("s", 1), i32),             # a Python int never widens an int tensor
    (("t", i64), ("s", 1), i64),
    (("t", f32), ("s", 1), f32),
    (("t", b8), ("s", 1), i64),              # bool with an int: int64
    (("t", b8), ("t", i64), i64),
    (("t", b8), ("t", i32), i32),
    (("t", b8), ("t", f16), f16),
    (("t", i64), ("t", f32), f32),           # categories first: float32 beats int64
    (("t", i64), ("s", True), i64),
    (("t", b8), ("s", True), b8),
    (("0d", f64), ("t", f32), f32),          # a 0-d tensor is like a scalar ...
    (("0d", i64), ("t", i32), i32),
    (("0d", f32), ("t", f16), f16),
    (("0d", f64), ("t", i32), f64),          # ... unless it is of a higher category: its dtype
    (("0d", f32), ("t", i64), f32),
    (("0d", f64), ("t", b8), f64),
    (("0d", i32), ("t", b8), i32),
    (("0d", f64), ("0d", f32), f64),         # only 0-d tensors: ordinary rules
    (("0d", i64), ("s", 2.5), f32),
    (("0d", f64), ("s", 1), f64),
    (("0d", i32), ("0d", i64), i64),
    (("s", 2.5), ("t", i32), f32),
    (("s", 1), ("t", b8), i64),
]


@pytest.mark.parametrize("lhs,rhs,expected", PROMOTION, ids=[f"{a}-{b}" for a, b, _ in PROMOTION])
def test_promotion_table(lhs, rhs, expected):
    a, b = _operand(lhs), _operand(rhs)
    assert minidl.result_type(a, b) is expected
    if lhs[0] == "s" and rhs[0] == "s":
        return
    for op in (operator.add, operator.mul, operator.sub):
        if expected is b8 and op is operator.sub:
            continue                          # PyTorch refuses to subtract bools
        out = op(a, b)
        assert out.dtype is expected, (op, out.dtype)
    # true division always gives a float: the promoted float, or the default float for ints/bools
    div_expected = expected if expected.is_floating_point else f32
    assert (a / b).dtype is div_expected
    assert (a < b).dtype is b8 and (a == b).dtype is b8


def test_promotion_of_specific_ops():
    i = minidl.tensor([3, 4])
    assert (i / i).dtype is f32 and (i / i).tolist() == [1., 1.]
    assert (i / 2).dtype is f32 and (i / 2).tolist() == [1.5, 2.]
    assert (i // 2).dtype is i64 and (i % 2.5).dtype is f32
    assert (i ** 2).dtype is i64 and (i ** 0.5).dtype is f32
    assert (2 ** i).dtype is i64 and (2.0 ** i).dtype is f32
    i32t = minidl.tensor([3], dtype=i32)
    assert (i32t / 2).dtype is f32 and (i32t // 2).dtype is i32 and (i32t % 2.5).dtype is f32
    assert minidl.where(minidl.tensor([True]), i32t, 2.5).dtype is f32
    assert minidl.where(minidl.tensor([True]), i32t, minidl.tensor([1.], dtype=f64)).dtype is f64
    assert minidl.cat([minidl.tensor([1], dtype=i32), minidl.tensor([1.], dtype=f16)]).dtype is f16
    assert minidl.maximum(i32t, minidl.tensor([1.])).dtype is f32
    assert minidl.tensor([True]).sum().dtype is i64
    assert minidl.tensor([1, 2]).float().mean().dtype is f32
    assert minidl.promote_types(i32, f16) is f16 and minidl.promote_types(b8, i32) is i32
    assert minidl.promote_types(f32, f64) is f64 and minidl.promote_types(i64, i32) is i64
    assert minidl.can_cast(i64, f32) and not minidl.can_cast(f32, i64)


def test_promotion_matches_torch():
    torch = pytest.importorskip("torch")
    to_torch = {f16: torch.float16, f32: torch.float32, f64: torch.float64, i32: torch.int32,
                i64: torch.int64, b8: torch.bool}

    def as_torch(spec):
        kind, v = spec
        if kind == "t":
            return torch.ones(2, dtype=to_torch[v])
        if kind == "0d":
            return torch.ones((), dtype=to_torch[v])
        return v

    for lhs, rhs, expected in PROMOTION:
        if lhs[0] == "s":
            lhs, rhs = rhs, lhs                   # torch.result_type wants a tensor first
        got = torch.result_type(as_torch(lhs), as_torch(rhs))
        assert got == to_torch[expected], (lhs, rhs, got, expected)
        assert minidl.result_type(_operand(lhs), _operand(rhs)) is expected
    # and every tensor-tensor combination of the six dtypes, with and without dims
    for da in to_torch:
        for db in to_torch:
            for ka in ("t", "0d"):
                for kb in ("t", "0d"):
                    want = torch.result_type(as_torch((ka, da)), as_torch((kb, db)))
                    got = minidl.result_type(_operand((ka, da)), _operand((kb, db)))
                    assert to_torch[got] == want, (ka, da, kb, db, got, want)
                    got_add = (_operand((ka, da)) + _operand((kb, db))).dtype
                    assert to_torch[got_add] == want, (ka, da, kb, db, got_add, want)


@given(S.broadcast_views([("float32", "float64", "int32", "int64", "bool"),
                          ("float32", "float64", "int32", "int64", "bool")]))
def test_mixed_dtype_arithmetic_values(views):
    (x, a), (y, b) = views
    out = x * y + x
    # numpy reference in float64 (or int64); the result is then cast to the promoted dtype
    src_a = a.astype(np.float64 if a.dtype.kind == "f" or b.dtype.kind == "f" else np.int64)
    src_b = b.astype(src_a.dtype)
    exp = src_a * src_b + src_a
    assert out.shape == exp.shape
    if out.dtype.is_floating_point:
        np.testing.assert_allclose(out.numpy().astype(np.float64), exp, rtol=1e-5, atol=1e-5)
    elif out.dtype is minidl.bool:
        np.testing.assert_array_equal(out.numpy(), exp != 0)
    else:
        np.testing.assert_array_equal(out.numpy(), exp.astype(out.dtype.np))


# ----------------------------------------------------------------------------- factories
def test_tensor_factory_copies_and_infers():
    a = np.arange(6.).reshape(2, 3)
    t = minidl.tensor(a)
    a[0, 0] = 100.
    assert t[0, 0].item() == 0.                              # a copy
    assert minidl.tensor([[1, 2], [3, 4]]).shape == (2, 2)
    assert minidl.tensor([]).shape == (0,) and minidl.tensor([]).dtype is f32
    assert minidl.tensor([[], []]).shape == (2, 0)
    assert minidl.tensor(3.5).shape == () and minidl.tensor(3.5).item() == 3.5
    assert minidl.tensor(7).dtype is i64 and minidl.tensor(7).shape == ()
    assert minidl.tensor(True).dtype is b8
    assert minidl.tensor(np.float32(2.5)).shape == () and minidl.tensor(np.float32(2.5)).dtype is f32
    assert minidl.tensor([1, 2], dtype=minidl.float64).tolist() == [1., 2.]
    assert minidl.tensor([1.7, -1.7], dtype=minidl.int64).tolist() == [1, -1]
    assert minidl.tensor([[1., 2.]], dtype=float).dtype is f32
    src = minidl.tensor([1., 2.])
    c = minidl.tensor(src)
    assert c.untyped_storage_id() != src.untyped_storage_id() and c.tolist() == [1., 2.]
    assert minidl.tensor([minidl.tensor(1.), minidl.tensor(2.)]).tolist() == [1., 2.]
    nc = minidl.tensor(np.arange(12).reshape(3, 4)[::-1, ::2])
    assert nc.is_contiguous() and nc.tolist() == np.arange(12).reshape(3, 4)[::-1, ::2].tolist()
    r = minidl.tensor([1., 2.], requires_grad=True)
    assert r.requires_grad and r.is_leaf
    with pytest.raises((TypeError, ValueError)):
        minidl.tensor(np.array(["a", "b"]))


def test_as_tensor_and_from_numpy_share_memory():
    a = np.arange(6.).reshape(2, 3)
    t = minidl.as_tensor(a)
    assert t.dtype is f64
    a[0, 0] = 42.
    assert t[0, 0].item() == 42.
    t[1, 2] = -1.
    assert a[1, 2] == -1.
    c = minidl.as_tensor(a, dtype=minidl.float32)            # a different dtype: a copy
    assert c.dtype is f32
    a[0, 1] = 7.
    assert c[0, 1].item() == 1.
    src = minidl.ones(3)
    assert minidl.as_tensor(src) is src
    assert minidl.as_tensor([1, 2]).dtype is i64
    f = minidl.from_numpy(a)
    f[0, 0] = 5.
    assert a[0, 0] == 5. and t[0, 0].item() == 5.
    with pytest.raises(TypeError):
        minidl.from_numpy([1, 2])


@given(S.view_cases(dtype=("float32", "int64", "bool", "float64"), kinds=S.VIEW_KINDS))
def test_from_numpy_of_any_strided_array(case):
    """from_numpy of non-contiguous, negative-stride, broadcast numpy views: same values, same
    strides, same memory."""
    a = case.a                    # (np.broadcast_to / np.diagonal views are read-only: fine)
    if a.flags.writeable:
        t = minidl.from_numpy(a)
    else:
        with pytest.warns(UserWarning, match="not writable"):
            t = minidl.from_numpy(a)
    assert tuple(t.shape) == a.shape
    np.testing.assert_array_equal(t.numpy(), a)
    if a.size:
        assert np.shares_memory(t.numpy(), case.base_a)
        for d in range(a.ndim):
            if a.shape[d] > 1:
                assert t.stride(d) * a.itemsize == a.strides[d]
        assert t.numpy().__array_interface__["data"][0] == a.__array_interface__["data"][0]
    # writes go both ways (zero strides: every alias gets the same value)
    if a.size and a.flags.writeable:
        base = case.base_a
        t.fill_(1 if a.dtype != np.bool_ else True)
        np.testing.assert_array_equal(base.reshape(-1)[case.ids().reshape(-1)], 1)


def test_from_numpy_negative_strides_explicit():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    v = a[::-1, ::-2]
    t = minidl.from_numpy(v)
    assert t.stride() == (-4, -2)
    assert t.tolist() == v.tolist()
    t[0, 0] = 99                                              # = a[2, 3]
    assert a[2, 3] == 99
    assert (t + 1).tolist() == (v + 1).tolist()
    assert t.contiguous().tolist() == v.tolist()
    tt = minidl.from_numpy(a.T)
    assert tt.stride() == (1, 4) and not tt.is_contiguous()
    e = minidl.from_numpy(np.zeros((0, 3), np.float32)[:, ::-1])
    assert e.shape == (0, 3)
    with pytest.raises(TypeError):
        minidl.from_numpy(np.array([1 + 2j]))


@pytest.mark.parametrize("factory,value", [("zeros", 0), ("ones", 1)])
def test_zeros_ones(factory, value):
    fn = getattr(minidl, factory)
    for args in [(2, 3), ((2, 3),), ([2, 3],), (minidl.Size([2, 3]),)]:
        t = fn(*args)
        assert t.shape == (2, 3) and t.dtype is f32
        np.testing.assert_array_equal(t.numpy(), np.full((2, 3), value, np.float32))
    assert fn(()).shape == () and fn(0).shape == (0,) and fn(2, 0, 3).shape == (2, 0, 3)
    assert fn(2, dtype=minidl.int32).dtype is i32
    assert fn(2, dtype=minidl.bool).tolist() == [bool(value)] * 2
    assert fn(2, requires_grad=True).requires_grad
    with pytest.raises(RuntimeError):
        fn(-1)
    like = getattr(minidl, factory + "_like")
    src = minidl.arange(6).reshape(2, 3).t()
    out = like(src)
    assert out.shape == (3, 2) and out.dtype is i64 and out.tolist() == [[value] * 2] * 3
    assert like(src, dtype=minidl.float64).dtype is f64


def test_full_empty_and_likes():
    assert minidl.full((2, 2), 1.5).dtype is f32 and minidl.full((2, 2), 1.5).tolist() == [[1.5] * 2] * 2
    assert minidl.full((2,), 3).dtype is i64
    assert minidl.full((2,), True).dtype is b8
    assert minidl.full((2,), 3, dtype=minidl.float64).dtype is f64
    assert minidl.full([3], -1).tolist() == [-1] * 3
    assert minidl.full((), 2.).shape == ()
    e = minidl.empty(2, 3)
    assert e.shape == (2, 3) and e.dtype is f32 and e.is_contiguous()
    assert minidl.empty((4,), dtype=minidl.int32).dtype is i32
    x = minidl.tensor([[1, 2, 3]], dtype=minidl.int32)
    assert minidl.full_like(x, 7).tolist() == [[7, 7, 7]] and minidl.full_like(x, 7).dtype is i32
    assert minidl.empty_like(x).shape == (1, 3) and minidl.empty_like(x).dtype is i32
    assert minidl.full_like(x, 2.5, dtype=minidl.float32).tolist() == [[2.5] * 3]
    assert x.new_zeros(2).dtype is i32 and x.new_ones((2, 2)).tolist() == [[1, 1], [1, 1]]
    assert x.new_full((2,), 4).tolist() == [4, 4] and x.new_tensor([1.5]).dtype is i32
    assert x.new_empty(3).shape == (3,)


def test_arange():
    cases = [((5,), np.arange(5)), ((2, 7), np.arange(2, 7)), ((0, 10, 3), np.arange(0, 10, 3)),
             ((5, 0, -1), np.arange(5, 0, -1)), ((3, 3), np.arange(3, 3)), ((0, -7, -2), np.arange(0, -7, -2))]
    for args, exp in cases:
        t = minidl.arange(*args)
        assert t.dtype is i64, args
        np.testing.assert_array_equal(t.numpy(), exp)
    f = minidl.arange(0, 1, 0.25)
    assert f.dtype is f32 and f.tolist() == [0., 0.25, 0.5, 0.75]
    assert minidl.arange(1.5, 4).tolist() == [1.5, 2.5, 3.5]
    assert minidl.arange(5, dtype=minidl.float64).dtype is f64
    assert minidl.arange(-1.0, -2.0, -0.5).tolist() == [-1.0, -1.5]
    assert minidl.arange(0, 1, 0.1).shape == (10,)
    assert minidl.arange(minidl.tensor(3)).tolist() == [0, 1, 2]
    with pytest.raises(RuntimeError):
        minidl.arange(0, 5, 0)


def test_linspace_eye():
    np.testing.assert_allclose(minidl.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5, dtype=np.float32))
    np.testing.assert_allclose(minidl.linspace(-2, 3, 7, dtype=minidl.float64).numpy(), np.linspace(-2, 3, 7))
    assert minidl.linspace(0, 1, 5).dtype is f32
    assert minidl.linspace(3, 3, 1).tolist() == [3.] and minidl.linspace(0, 1, 0).shape == (0,)
    assert minidl.linspace(1, 0, 3).tolist() == [1., 0.5, 0.]
    np.testing.assert_array_equal(minidl.eye(3).numpy(), np.eye(3, dtype=np.float32))
    np.testing.assert_array_equal(minidl.eye(2, 4).numpy(), np.eye(2, 4))
    assert minidl.eye(3, dtype=minidl.int64).dtype is i64
    assert minidl.eye(0).shape == (0, 0)


# ----------------------------------------------------------------------------- random
def test_rand_randn_randint_shapes_and_ranges():
    minidl.manual_seed(0)
    r = minidl.rand(20000)
    assert r.dtype is f32 and r.shape == (20000,)
    v = r.numpy()
    assert v.min() >= 0 and v.max() < 1 and abs(v.mean() - 0.5) < 0.02 and abs(v.var() - 1 / 12) < 0.01
    n = minidl.randn(100, 200).numpy()
    assert n.shape == (100, 200) and abs(n.mean()) < 0.03 and abs(n.std() - 1) < 0.03
    assert minidl.randn((2, 3), dtype=minidl.float64).dtype is f64
    assert minidl.rand(2, 3).shape == (2, 3) and minidl.rand((2, 3)).shape == (2, 3)
    i = minidl.randint(3, 7, (5000,))
    assert i.dtype is i64 and set(np.unique(i.numpy())) == {3, 4, 5, 6}
    j = minidl.randint(4, (2, 2))
    assert j.shape == (2, 2) and j.numpy().min() >= 0 and j.numpy().max() < 4
    assert minidl.randint(0, 2, (3,), dtype=minidl.int32).dtype is i32
    x = minidl.zeros(2, 3, dtype=minidl.float64)
    assert minidl.rand_like(x).dtype is f64 and minidl.randn_like(x).shape == (2, 3)
    rl = minidl.randint_like(x, 5, 8)
    assert rl.shape == (2, 3) and rl.numpy().min() >= 5 and rl.numpy().max() < 8
    p = minidl.randperm(10)
    assert sorted(p.tolist()) == list(range(10)) and p.dtype is i64


def test_manual_seed_reproducibility_and_generators():
    minidl.manual_seed(123)
    a = [minidl.rand(5).tolist(), minidl.randn(3).tolist(), minidl.randint(0, 100, (4,)).tolist()]
    minidl.manual_seed(123)
    b = [minidl.rand(5).tolist(), minidl.randn(3).tolist(), minidl.randint(0, 100, (4,)).tolist()]
    assert a == b
    assert minidl.initial_seed() == 123
    minidl.manual_seed(124)
    assert minidl.rand(5).tolist() != a[0]
    # a Generator is an independent stream
    g1 = minidl.Generator().manual_seed(7)
    minidl.manual_seed(123)
    x = minidl.rand(4, generator=g1).tolist()
    after = minidl.rand(5).tolist()
    assert after == a[0]                                   # the global stream did not move
    g2 = minidl.Generator()
    g2.manual_seed(7)
    assert minidl.rand(4, generator=g2).tolist() == x
    assert g2.initial_seed() == 7
    y = minidl.zeros(3)
    minidl.manual_seed(5)
    y.uniform_(2, 3)
    assert all(2 <= v < 3 for v in y.tolist())
    y.normal_()
    y.bernoulli_(0.5)
    assert set(y.tolist()) <= {0., 1.}


def test_rng_state_round_trip():
    minidl.manual_seed(42)
    minidl.rand(3)
    state = minidl.get_rng_state()
    assert state.dtype is minidl.uint8
    first = [minidl.rand(4).tolist(), minidl.randn(2, 2).tolist(), minidl.randint(0, 1000, (3,)).tolist()]
    minidl.rand(100)                                       # move on
    minidl.set_rng_state(state)
    again = [minidl.rand(4).tolist(), minidl.randn(2, 2).tolist(), minidl.randint(0, 1000, (3,)).tolist()]
    assert first == again
    # the state is a snapshot, not a live view
    saved = state.clone()
    minidl.rand(10)
    np.testing.assert_array_equal(state.numpy(), saved.numpy())
    g = minidl.Generator().manual_seed(3)
    gs = g.get_state()
    v = minidl.randn(5, generator=g).tolist()
    g.set_state(gs)
    assert minidl.randn(5, generator=g).tolist() == v
    with pytest.raises(RuntimeError):
        minidl.set_rng_state(minidl.zeros(3, dtype=minidl.uint8))


def test_num_threads():
    before = minidl.get_num_threads()
    assert isinstance(before, int) and before >= 1
    try:
        minidl.set_num_threads(1)
        assert minidl.get_num_threads() == 1
        x = minidl.arange(100000)
        assert (x + x).sum().item() == 2 * sum(range(100000))
        assert minidl.ones(300, 300).sum().item() == 90000.
    finally:
        minidl.set_num_threads(before)
    assert minidl.get_num_threads() == before
    with pytest.raises(RuntimeError):
        minidl.set_num_threads(0)


# ----------------------------------------------------------------------------- numpy interop
def test_numpy_shares_memory_and_conversions():
    t = minidl.arange(6.).reshape(2, 3)
    a = t.numpy()
    assert a.dtype == np.float32 and np.shares_memory(a, t.numpy())
    a[0, 1] = 9.
    assert t[0, 1].item() == 9.
    arr = np.asarray(t)
    assert np.shares_memory(arr, a) and arr.shape == (2, 3)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert np.array(t).tolist() == t.tolist()
    r = minidl.tensor([1., 2.], requires_grad=True)
    with pytest.raises(RuntimeError):
        r.numpy()
    assert r.detach().numpy().tolist() == [1., 2.]
    assert np.asarray(r).tolist() == [1., 2.]


def test_item_tolist_format_index():
    assert minidl.tensor(2.5).item() == 2.5 and isinstance(minidl.tensor(2.5).item(), float)
    assert minidl.tensor([7]).item() == 7 and isinstance(minidl.tensor([7]).item(), int)
    assert minidl.tensor([[True]]).item() is True
    with pytest.raises(RuntimeError):
        minidl.tensor([1, 2]).item()
    assert minidl.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert minidl.tensor(3).tolist() == 3
    assert isinstance(minidl.tensor([1.5]).tolist()[0], float)
    assert minidl.arange(6).reshape(2, 3).t().tolist() == [[0, 3], [1, 4], [2, 5]]
    assert format(minidl.tensor(3.14159), ".2f") == "3.14"
    assert f"{minidl.tensor(2):03d}" == "002"
    assert float(minidl.tensor([1.5])) == 1.5 and int(minidl.tensor(3.7)) == 3 and bool(minidl.tensor(0.)) is False
    assert operator.index(minidl.tensor(4)) == 4
    assert [10, 20, 30][minidl.tensor(1)] == 20
    assert range(10)[minidl.tensor(2, dtype=minidl.int32)] == 2
    with pytest.raises(TypeError):
        operator.index(minidl.tensor(1.))
    with pytest.raises(TypeError):
        operator.index(minidl.tensor([1, 2]))
    with pytest.raises(RuntimeError):
        bool(minidl.tensor([1, 2]))
    assert len(minidl.zeros(4, 2)) == 4
    with pytest.raises(TypeError):
        len(minidl.tensor(1.))
    assert [v.item() for v in minidl.tensor([1, 2, 3])] == [1, 2, 3]


def test_dtype_conversions():
    x = minidl.tensor([1.7, -2.2, 0.])
    assert x.float() is x
    d = x.double()
    assert d.dtype is f64 and np.allclose(d.numpy(), [1.7, -2.2, 0.])
    l_ = x.long()
    assert l_.dtype is i64 and l_.tolist() == [1, -2, 0]                 # truncation toward zero
    assert x.int().dtype is i32 and x.int().tolist() == [1, -2, 0]
    assert x.bool().tolist() == [True, True, False]
    assert x.half().dtype is f16
    assert x.to(minidl.float64).dtype is f64 and x.to(dtype=minidl.int64).tolist() == [1, -2, 0]
    assert x.to(minidl.float32) is x
    assert x.to(float).dtype is f32 and x.to(int).dtype is i64 and x.to(bool).dtype is b8
    assert x.to("cpu") is x and x.to("cpu", minidl.float64).dtype is f64
    assert x.to(minidl.zeros(1, dtype=minidl.int32)).dtype is i32
    assert x.type(minidl.float64).dtype is f64 and x.type() == "minidl.FloatTensor"  # as torch: the type name
    # conversions copy: the original is untouched by writes to the converted tensor
    d[0] = 100.
    assert x[0].item() == pytest.approx(1.7)
    assert minidl.tensor([True, False]).long().tolist() == [1, 0]
    assert minidl.tensor([300]).to(minidl.uint8).tolist() == [44]    # wraps, as a C cast


# ----------------------------------------------------------------------------- repr
def test_repr_like_pytorch():
    assert repr(minidl.tensor([1., 2.])) == "tensor([1., 2.])"
    assert repr(minidl.tensor([1., 2.])).startswith("tensor([1., 2.]")
    assert repr(minidl.tensor([1.5, 2.25])) == "tensor([1.5000, 2.2500])"
    assert repr(minidl.tensor(3.)) == "tensor(3.)"
    assert repr(minidl.tensor(2.5)) == "tensor(2.5000)"
    assert repr(minidl.tensor([1, 2, 3])) == "tensor([1, 2, 3])"
    assert repr(minidl.tensor([True, False])) == "tensor([ True, False])"
    assert repr(minidl.tensor([[1.5, 2.25], [3., 4.]])) == "tensor([[1.5000, 2.2500],\n        [3.0000, 4.0000]])"
    assert repr(minidl.tensor(2.5, dtype=minidl.float64)) == "tensor(2.5000, dtype=minidl.float64)"
    assert repr(minidl.zeros(2, 3, dtype=minidl.int32)) == ("tensor([[0, 0, 0],\n        [0, 0, 0]], "
                                                             "dtype=minidl.int32)")
    assert repr(minidl.zeros(2, 0)) == "tensor([], size=(2, 0))"
    assert repr(minidl.zeros(0, dtype=minidl.int64)) == "tensor([], dtype=minidl.int64)"
    assert repr(minidl.tensor(1e10)) == "tensor(1.0000e+10)"
    r = minidl.tensor([1., 2.], requires_grad=True)
    assert repr(r) == "tensor([1., 2.], requires_grad=True)"
    y = r * 2
    assert re.fullmatch(r"tensor\(\[2\., 4\.\], grad_fn=<MulBackward0>\)", repr(y)), repr(y)
    assert str(minidl.tensor([1., 2.])) == "tensor([1., 2.])"
    big = repr(minidl.arange(2000))
    assert "..." in big and big.startswith("tensor([   0,    1,    2,")
    assert repr(minidl.Size([2, 3])) == "minidl.Size([2, 3])"
    assert minidl.zeros(2, 3).shape == (2, 3) and isinstance(minidl.zeros(2, 3).shape, tuple)
    assert minidl.zeros(2, 3).size() == (2, 3) and minidl.zeros(2, 3).size(-1) == 3


def test_numpy_scalars_keep_their_dtype():
    assert minidl.as_tensor(np.float64(2.5)).dtype is minidl.float64
    assert minidl.tensor(np.int32(3)).dtype is minidl.int32
    assert minidl.tensor(np.float32(1.5)).item() == 1.5
    assert minidl.tensor(2.5).dtype is minidl.float32  # a Python float takes the default dtype
