"""Calls torch 2.13 computes and minidl used to refuse: integer powers and bitwise ops, normal's tensor forms,
factories' ``layout=``, the nuclear norm, broadcast_shapes of ints. Each is compared with torch itself."""
import numpy as np
import pytest

import minidl

torch = pytest.importorskip("torch")


def _same(ours, theirs):
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())


# ----------------------------------------------------------------------------- integer powers
BASES = [0, 0, 5, -2, -1, 1, -1, 3, 2, 7, 0]
EXPONENTS = [-1, 0, -2, -1, -4, -7, -3, 39, 62, -9, 3]


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_an_integer_tensor_to_negative_tensor_powers_is_computed_as_torch(dtype):
    bases = [b % 256 if dtype == "uint8" else b for b in BASES]
    ours = minidl.tensor(bases, dtype=getattr(minidl, dtype)) ** minidl.tensor(EXPONENTS)
    _same(ours, torch.tensor(bases, dtype=getattr(torch, dtype)) ** torch.tensor(EXPONENTS))
    _same(6 ** minidl.tensor(-8), 6 ** torch.tensor(-8))  # a number to tensor powers
    _same(minidl.pow(2, minidl.tensor([-1, 3])), torch.pow(2, torch.tensor([-1, 3])))


def test_an_integer_tensor_to_a_negative_number_still_raises_as_in_torch():
    for call in (lambda lib: lib.tensor([2]) ** -1, lambda lib: lib.tensor([2]).pow_(-2)):
        with pytest.raises(RuntimeError, match="negative integer powers"):
            call(torch)
        with pytest.raises(RuntimeError, match="negative integer powers"):
            call(minidl)
    _same(minidl.tensor([2]) ** -1.0, torch.tensor([2]) ** -1.0)


# ----------------------------------------------------------------------------- normal, layout=
def test_normal_takes_torch_s_tensor_forms():
    for mean, std, shape in (((2, 1), (3,), (2, 3)), (None, (3,), (3,)), ((4,), None, (4,))):
        args = [minidl.full(s, 3.0) if s else 3.0 for s in (mean, std)]
        reference = [torch.full(s, 3.0) if s else 3.0 for s in (mean, std)]
        assert tuple(minidl.normal(*args).shape) == tuple(torch.normal(*reference).shape) == shape
    assert minidl.normal(minidl.zeros(2, dtype=minidl.float64), 1.0).dtype is minidl.float64
    assert minidl.normal(0.0, minidl.ones(2)).dtype is minidl.float32


def test_normal_draws_each_element_from_its_own_mean_and_std():
    minidl.manual_seed(0)
    mean = minidl.tensor([[-5.0], [10.0]])
    std = minidl.tensor([0.5, 2.0, 4.0])
    draws = minidl.normal(mean.expand(2, 3).unsqueeze(0).expand(4000, 2, 3), std).numpy()
    means, stds = draws.mean(0), draws.std(0)
    expected_std = np.broadcast_to([0.5, 2.0, 4.0], (2, 3))
    assert np.all(np.abs(means - np.array([[-5.0], [10.0]])) < 4 * expected_std / np.sqrt(4000) + 1e-9)
    assert np.all(np.abs(stds / expected_std - 1) < 0.06)


def test_normal_gives_zero_gradients_as_torch():
    results = []
    for lib in (minidl, torch):
        mean, std = lib.zeros(3, requires_grad=True), lib.ones(3, requires_grad=True)
        lib.normal(mean, std).sum().backward()
        results.append((mean.grad.tolist(), std.grad.tolist()))
    assert results[0] == results[1] == ([0.0] * 3, [0.0] * 3)


@pytest.mark.parametrize("call, message", [
    (lambda lib: lib.normal(lib.zeros(3), lib.tensor([1.0, -1.0, 1.0])), "std >= 0"),
    (lambda lib: lib.normal(lib.zeros(2), lib.ones(3)), "2"),
    (lambda lib: lib.normal(lib.zeros(2, dtype=lib.int64), 1.0), "Long|int64"),
])
def test_normal_refuses_what_torch_refuses(call, message):
    with pytest.raises(RuntimeError, match=message):
        call(torch)
    with pytest.raises(RuntimeError, match=message):
        call(minidl)


@pytest.mark.parametrize("factory", [
    lambda lib, **kw: lib.zeros(2, 3, **kw), lambda lib, **kw: lib.ones(2, **kw), lambda lib, **kw: lib.empty(2, **kw),
    lambda lib, **kw: lib.full((2,), 7, **kw), lambda lib, **kw: lib.arange(4, **kw),
    lambda lib, **kw: lib.linspace(0, 1, 5, **kw), lambda lib, **kw: lib.eye(3, **kw),
    lambda lib, **kw: lib.rand(2, **kw), lambda lib, **kw: lib.randn(2, **kw),
    lambda lib, **kw: lib.randint(5, (3,), **kw), lambda lib, **kw: lib.randperm(4, **kw),
    lambda lib, **kw: lib.normal(0.0, 1.0, (2,), **kw), lambda lib, **kw: lib.zeros_like(lib.ones(2), **kw),
    lambda lib, **kw: lib.full_like(lib.ones(2), 3, **kw), lambda lib, **kw: lib.randn_like(lib.ones(2), **kw)])
def test_factories_take_the_strided_layout(factory):
    ours, theirs = factory(minidl, layout=minidl.strided), factory(torch, layout=torch.strided)
    assert tuple(ours.shape) == tuple(theirs.shape) and ours.layout == minidl.strided
    with pytest.raises(RuntimeError, match="layout=minidl.sparse_coo"):
        factory(minidl, layout=minidl.sparse_coo)


# ----------------------------------------------------------------------------- norm "nuc", broadcast_shapes
@pytest.mark.parametrize("shape, kwargs", [((3, 4), {}), ((2, 3, 4), {"dim": (0, 2)}),
                                           ((2, 3, 4), {"dim": (2, 1), "keepdim": True}), ((4, 2), {"dim": (-1, -2)})])
def test_the_nuclear_norm_and_its_gradient_match_torch(shape, kwargs):
    values = np.random.default_rng(0).standard_normal(shape)
    x, t = minidl.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
    ours, theirs = minidl.norm(x, "nuc", **kwargs), torch.norm(t, "nuc", **kwargs)
    weights = np.arange(1.0, theirs.numel() + 1).reshape(tuple(theirs.shape))
    (ours * minidl.tensor(weights)).sum().backward()
    (theirs * torch.tensor(weights)).sum().backward()
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert minidl.tensor([[1.0, 2.0], [3.0, 4.0]]).norm(p="nuc").dtype is minidl.float32


@pytest.mark.parametrize("call", [lambda lib: lib.norm(lib.ones(2, 2, 3), "nuc"),
                                  lambda lib: lib.norm(lib.ones(2, 2), "nuc", dim=1),
                                  lambda lib: lib.norm(lib.ones(2, 2, dtype=lib.int64), "nuc")])
def test_the_nuclear_norm_refuses_what_torch_refuses(call):
    with pytest.raises(RuntimeError):
        call(torch)
    with pytest.raises(RuntimeError, match="'nuc'"):
        call(minidl)


@pytest.mark.parametrize("shapes", [((5, 1), 5), (5, (2, 1)), (3,), (), ((2, 1), (1, 4), 4)])
def test_broadcast_shapes_takes_ints_as_torch(shapes):
    assert tuple(minidl.broadcast_shapes(*shapes)) == tuple(torch.broadcast_shapes(*shapes))


def test_broadcast_shapes_names_the_clash():
    with pytest.raises(RuntimeError, match="broadcast_shapes"):
        minidl.broadcast_shapes(2, (3,))


# ----------------------------------------------------------------------------- bitwise ops
INTS = [0, 1, -1, 5, -8, 12, 2 ** 40, -(2 ** 62)]
SHIFTS = [0, 1, 3, 31, 63, 64, 70, -1]
OPERATORS = {"&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b,
             "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b}


def _ints(lib, values, dtype="int64"):
    return lib.tensor(values, dtype=getattr(lib, dtype))


@pytest.mark.parametrize("symbol", OPERATORS)
@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "uint8"])
def test_bitwise_operators_on_integer_tensors_match_torch(symbol, dtype):
    apply = OPERATORS[symbol]
    low, high = {"int64": (-2 ** 63, 2 ** 63), "int32": (-2 ** 31, 2 ** 31), "int16": (-2 ** 15, 2 ** 15),
                 "uint8": (0, 256)}[dtype]
    left = [v for v in INTS if low <= v < high]
    right = [v for v in (SHIFTS if symbol in ("<<", ">>") else INTS) if low <= v < high]
    a = np.repeat(left, len(right)).tolist()
    b = np.tile(right, len(left)).tolist()
    _same(apply(_ints(minidl, a, dtype), _ints(minidl, b, dtype)),
          apply(_ints(torch, a, dtype), _ints(torch, b, dtype)))
    for number in (5, 3):  # a number on either side, and the reflected operator
        _same(apply(_ints(minidl, a, dtype), number), apply(_ints(torch, a, dtype), number))
        _same(apply(number, _ints(minidl, right, dtype)), apply(number, _ints(torch, right, dtype)))


@pytest.mark.parametrize("name", ["and", "or", "xor", "lshift", "rshift"])
def test_in_place_bitwise_operators_write_into_the_tensor_as_torch(name):
    results = []
    for lib in (minidl, torch):
        base = _ints(lib, [[1, -8, 12], [7, 2 ** 40, 0]])
        view = base[1]
        assert getattr(view, f"__i{name}__")(3) is view  # view <op>= 3 writes through the view
        results.append(base)
    _same(*results)


def test_bitwise_functions_bool_tensors_and_not_match_torch():
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"):
        _same(getattr(minidl, name)(_ints(minidl, INTS), 3), getattr(torch, name)(_ints(torch, INTS), 3))
    flags = ([True, False, True], [True, True, False])
    for symbol in ("&", "|", "^"):
        _same(OPERATORS[symbol](minidl.tensor(flags[0]), minidl.tensor(flags[1])),
              OPERATORS[symbol](torch.tensor(flags[0]), torch.tensor(flags[1])))
    _same(minidl.tensor([True, False]) ^ 1, torch.tensor([True, False]) ^ 1)  # bool with a number: int64
    for dtype in ("int64", "uint8", "int32"):
        _same(~_ints(minidl, [0, 5, 200], dtype), ~_ints(torch, [0, 5, 200], dtype))
    _same(~minidl.tensor([True, False]), ~torch.tensor([True, False]))


@pytest.mark.parametrize("call", [lambda lib: lib.tensor([1.0]) | 1, lambda lib: 1 & lib.tensor([1.5]),
                                  lambda lib: ~lib.tensor([1.0]), lambda lib: lib.tensor([True]) << lib.tensor([True]),
                                  lambda lib: lib.tensor([1]) >> 0.5])
def test_bitwise_ops_refuse_what_torch_refuses(call):
    with pytest.raises((RuntimeError, TypeError)) as theirs:
        call(torch)
    with pytest.raises(theirs.type, match="bitwise"):
        call(minidl)


# ----------------------------------------------------------------------------- embedding
def test_a_sparse_embedding_scaled_by_frequency_looks_up_and_refuses_only_its_backward_as_torch():
    weights = np.random.default_rng(3).standard_normal((5, 3))
    outs = []
    for lib in (minidl, torch):
        w = lib.tensor(weights, requires_grad=True)
        out = lib.nn.functional.embedding(lib.tensor([[1, 1], [4, 0]]), w, sparse=True, scale_grad_by_freq=True)
        with pytest.raises(RuntimeError, match="scale_grad_by_freq not supported with sparse gradients"):
            out.sum().backward()
        outs.append(out)
    _same(*outs)
