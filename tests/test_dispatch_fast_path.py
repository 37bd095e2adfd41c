"""The flattened calls of elementwise ops (issue 38): Binary.apply and Unary.apply on float operands
of one shape (or a number) without a graph to record, and in-place binary ops, skip forward's
layers. Checked against PyTorch on every layout they accept, and on the calls they must hand to the
general path (graphs, promotion, broadcasting, an operand in the written tensor's own memory)."""
import numpy as np
import pytest
import torch

import minidl as md

OPERATORS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "pow": lambda a, b: a.abs() ** b, "remainder": lambda a, b: a % b, "floordiv": lambda a, b: a // b,
}
FUNCTIONS = ("maximum", "minimum", "atan2")


# layout name -> (library, packed (4, 5) tensor) -> the same values in that layout
LAYOUTS = {
    "packed": lambda lib, x: x,
    "transposed": lambda lib, x: x.t().contiguous().t(),
    "expanded": lambda lib, x: x[:1].expand(4, 5),
    "negative-step": lambda lib, x: x.flip(0) if lib is torch else x[::-1],   # (torch has no negative steps)
}


def _pair(dtype, a_layout, b_layout):
    rng = np.random.default_rng(7)
    values = [rng.uniform(0.5, 2.0, (4, 5)) * rng.choice([-1, 1], (4, 5)) for _ in range(2)]
    np_dtype = {md.float32: np.float32, md.float64: np.float64}[dtype]
    names = (a_layout, b_layout)
    ours = [LAYOUTS[name](md, md.tensor(v.astype(np_dtype))) for name, v in zip(names, values)]
    theirs = [LAYOUTS[name](torch, torch.tensor(v.astype(np_dtype))) for name, v in zip(names, values)]
    return ours, theirs


@pytest.mark.parametrize("dtype", [md.float32, md.float64])
@pytest.mark.parametrize("layouts", [("packed", "packed"), ("transposed", "packed"), ("packed", "expanded"),
                                     ("negative-step", "transposed")])
@pytest.mark.parametrize("grad_enabled", [True, False])
def test_same_shape_float_operands_compute_as_torch(dtype, layouts, grad_enabled):
    (a, b), (ta, tb) = _pair(dtype, *layouts)
    with md.set_grad_enabled(grad_enabled):
        results = {name: fn(a, b) for name, fn in OPERATORS.items()}
        results.update((name, getattr(md, name)(a, b)) for name in FUNCTIONS)
    expected = {name: fn(ta, tb) for name, fn in OPERATORS.items()}
    expected.update((name, getattr(torch, name)(ta, tb)) for name in FUNCTIONS)
    for name, got in results.items():
        assert got.dtype is dtype and got.shape == (4, 5), name
        assert not got.requires_grad and got.grad_fn is None, name
        torch.testing.assert_close(torch.from_numpy(got.numpy().copy()), expected[name], msg=name)


@pytest.mark.parametrize("dtype", [md.float32, md.float64])
@pytest.mark.parametrize("layout", ["packed", "transposed", "expanded", "negative-step"])
def test_unary_ops_on_float_operands_compute_as_torch(dtype, layout):
    (a, _), (ta, _) = _pair(dtype, layout, "packed")
    for name in ("neg", "abs", "exp", "tanh", "sigmoid", "relu", "sqrt", "floor"):
        x, tx = (a.abs(), ta.abs()) if name == "sqrt" else (a, ta)
        got, want = getattr(x, name)(), getattr(tx, name)()
        assert got.dtype is dtype and not got.requires_grad, name
        torch.testing.assert_close(torch.from_numpy(got.numpy().copy()), want, msg=name)


@pytest.mark.parametrize("dtype", [md.float32, md.float64])
@pytest.mark.parametrize("number", [2.5, -3, 0.1, md.tensor(1.5)])
def test_a_number_operand_computes_as_torch(dtype, number):
    (a, _), (ta, _) = _pair(dtype, "transposed", "packed")
    if isinstance(number, md.Tensor):
        number, t_number = number.to(dtype), torch.tensor(number.item(), dtype=ta.dtype)
    else:
        t_number = number
    for name, fn in OPERATORS.items():
        got, want = fn(a, number), fn(ta, t_number)
        assert got.dtype is dtype, name
        torch.testing.assert_close(torch.from_numpy(got.numpy().copy()), want, msg=name)


@pytest.mark.parametrize("dtype", [md.float32, md.float64])
@pytest.mark.parametrize("layouts", [("packed", "packed"), ("transposed", "negative-step"), ("packed", "expanded")])
def test_in_place_ops_write_as_torch(dtype, layouts):
    for name in ("add_", "sub_", "mul_", "div_"):
        (a, b), (ta, tb) = _pair(dtype, *layouts)
        version = a._version
        assert getattr(a, name)(b) is a
        getattr(ta, name)(tb)
        assert a._version == version + 1, name
        torch.testing.assert_close(torch.from_numpy(a.numpy().copy()), ta, msg=name)


def test_in_place_ops_reading_their_own_memory_as_torch():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 4))
    for fn in (lambda t: t.mul_(t), lambda t: t[:, :2].add_(t[:, 2:])):   # (one storage: the general path)
        got, want = fn(md.tensor(x)), fn(torch.tensor(x))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(got._base.numpy() if got._base is not None else got.numpy(),
                                      (want._base if want._base is not None else want).numpy())


def test_in_place_ops_keep_their_checks():
    leaf = md.ones(2, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="add_: a leaf Variable that requires grad"):
        leaf.add_(md.ones(2, 2))
    readonly = np.ones((2, 2), np.float32)
    readonly.flags.writeable = False
    with pytest.warns(UserWarning, match="not writable"), pytest.raises(RuntimeError, match="mul_: the tensor's memory is read-only"):
        md.from_numpy(readonly).mul_(md.ones(2, 2))
    with pytest.raises(RuntimeError, match="add_: unsupported operation: more than one element"):
        md.ones(1, 2).expand(3, 2).add_(md.ones(3, 2))


def test_the_result_is_a_new_tensor():
    a, b = md.ones(3, 3), md.full((3, 3), 2.0)
    y = a * b
    y.add_(1.0)
    assert a.tolist() == [[1.0] * 3] * 3 and b.tolist() == [[2.0] * 3] * 3
    assert (a._version, b._version) == (0, 0)


def test_operands_that_require_grad_still_record_the_graph():
    (a, b), (ta, tb) = _pair(md.float64, "packed", "transposed")
    a.requires_grad_()
    ta.requires_grad_()
    y = a * b + b
    assert y.grad_fn.name() == "AddBackward0"
    y.sum().backward()
    (ta * tb + tb).sum().backward()
    torch.testing.assert_close(torch.from_numpy(a.grad.numpy().copy()), ta.grad)
    with md.no_grad():
        assert (a * b).grad_fn is None


@pytest.mark.parametrize("make", [
    lambda: (md.ones(2, 3), md.ones(2, 3, dtype=md.float64)),       # promotion
    lambda: (md.ones(2, 3), md.ones(3)),                            # broadcasting
    lambda: (md.ones(2, 3, dtype=md.float16), md.ones(2, 3, dtype=md.float16)),  # computed in float32
    lambda: (md.ones(2, 3, dtype=md.int64), md.ones(2, 3, dtype=md.int64)),
])
def test_other_operands_take_the_general_path_as_torch(make):
    a, b = make()
    ta, tb = (torch.from_numpy(x.numpy().copy()) for x in (a, b))
    for fn in (lambda x, y: x * y, lambda x, y: x / y):
        got, want = fn(a, b), fn(ta, tb)
        assert got.dtype.name == str(want.dtype).removeprefix("torch.") and got.shape == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_shapes_that_do_not_broadcast_name_the_op():
    with pytest.raises(RuntimeError, match="mul"):
        md.ones(3, 4) * md.ones(5)
