"""Errors: the right exception type, raised before any kernel touches memory, with a message
that names the op and the offending shapes / dtypes / indices."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import minidl


@pytest.fixture
def x():
    return minidl.arange(6.0).reshape(2, 3)


def _all_in(message, *parts):
    missing = [p for p in parts if p not in message]
    assert not missing, f"{missing} not in error message: {message!r}"


# ----------------------------------------------------------------------------- shape mismatches
@pytest.mark.parametrize("op,fn,shapes", [
    ("add", lambda a, b: a + b, ((2, 3), (4,))),
    ("add", lambda a, b: minidl.add(a, b), ((2, 3), (3, 2))),
    ("mul", lambda a, b: a * b, ((2, 3), (3, 1))),
    ("sub", lambda a, b: a - b, ((4, 1, 3), (2, 2))),
    ("div", lambda a, b: a / b, ((5,), (2, 3))),
    ("maximum", minidl.maximum, ((2, 3), (2,))),
    ("matmul", lambda a, b: a @ b, ((2, 3), (2, 3))),
    ("matmul", minidl.matmul, ((4, 2, 3), (5, 3, 2))),  # batch dims do not broadcast
    ("matmul", minidl.matmul, ((3,), (4,))),
    ("cat", lambda a, b: minidl.cat([a, b], 0), ((2, 3), (2, 2))),
    ("cat", lambda a, b: minidl.cat([a, b], 1), ((2, 3), (3, 3))),
    ("stack", lambda a, b: minidl.stack([a, b]), ((2, 3), (3, 2))),
    ("bmm", minidl.bmm, ((2, 2, 3), (3, 3, 2))),
])
def test_shape_mismatch_names_op_and_shapes(op, fn, shapes):
    a, b = minidl.ones(*shapes[0]), minidl.ones(*shapes[1])
    with pytest.raises(RuntimeError) as info:
        fn(a, b)
    _all_in(str(info.value), op, str(list(shapes[0])), str(list(shapes[1])))


def test_view_and_reshape_mismatch(x):
    with pytest.raises(RuntimeError) as info:
        x.view(4, 2)
    _all_in(str(info.value), "view", "[4, 2]", "[2, 3]")
    with pytest.raises(RuntimeError) as info:
        x.reshape(5)
    _all_in(str(info.value), "reshape", "[5]", "[2, 3]")
    with pytest.raises(RuntimeError) as info:
        x.t().view(6)  # element count fits, strides do not
    _all_in(str(info.value), "view", "[3, 2]", "[6]", "reshape")
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        x.view(-1, -1)


def test_other_shape_errors(x):
    with pytest.raises(RuntimeError) as info:
        x.expand(3, 4)
    _all_in(str(info.value), "expand", "[3, 4]", "[2, 3]")
    with pytest.raises(RuntimeError) as info:
        minidl.where(x > 1, x, minidl.ones(4))
    _all_in(str(info.value), "where", "[2, 3]", "[4]")
    with pytest.raises(RuntimeError) as info:
        x.add_(minidl.ones(2, 3, 2))  # in-place result must keep the target's shape
    _all_in(str(info.value), "[2, 3]", "[2, 3, 2]")
    with pytest.raises(RuntimeError, match="split_sizes"):
        x.split([1, 1], 1)
    with pytest.raises(RuntimeError, match="einsum"):
        minidl.einsum("ij,jk", x, x)
    with pytest.raises(RuntimeError, match="permutation"):
        x.permute(0, 0)
    with pytest.raises(RuntimeError, match="at least 1D"):
        minidl.matmul(minidl.tensor(2.0), x)
    with pytest.raises(RuntimeError, match="zero-dimensional"):
        minidl.cat([minidl.tensor(1.0), minidl.tensor(2.0)])
    with pytest.raises(RuntimeError, match="negative dimension"):
        minidl.zeros(2, -1)
    with pytest.raises(RuntimeError, match="outside the storage"):
        x.as_strided((4,), (2,))


def test_shape_errors_leave_operands_untouched(x):
    before = x.numpy().copy()
    with pytest.raises(RuntimeError):
        x.add_(minidl.ones(4))
    np.testing.assert_array_equal(x.numpy(), before)
    assert x._version == 0


def test_dimension_out_of_range(x):
    for fn, op in ((lambda: x.sum(2), "sum"), (lambda: x.softmax(-3), "softmax"), (lambda: x.squeeze(5), "squeeze"),
                   (lambda: x.cumsum(3), "cumsum"), (lambda: minidl.cat([x, x], 2), "cat")):
        with pytest.raises(IndexError) as info:
            fn()
        _all_in(str(info.value), op, "out of range")


# ----------------------------------------------------------------------------- out-of-range indices
class _KernelSpy:
    """Counts calls of the index-driven kernels (take/put) while installed."""

    names = ("take", "put")

    def __init__(self):
        self.calls = 0
        self.originals = {}

    def __enter__(self):
        for name in self.names:
            original = minidl.kernels.get(name, "cpu")
            self.originals[name] = original

            def spy(*args, _original=original):
                self.calls += 1
                return _original(*args)

            minidl.kernels.register(name, "cpu")(spy)
        return self

    def __exit__(self, *exc):
        for name, original in self.originals.items():
            minidl.kernels.register(name, "cpu")(original)


OUT_OF_RANGE = [
    ("getitem-int", lambda x: x[2], "index 2", "size 2"),
    ("getitem-negative-int", lambda x: x[-3], "index -3", "size 2"),
    ("getitem-int-dim1", lambda x: x[:, 3], "index 3", "size 3"),
    ("getitem-tensor", lambda x: x[minidl.tensor([0, 2])], "index 2", "size 2"),
    ("getitem-list-negative", lambda x: x[[0, -3]], "index -3", "size 2"),
    ("getitem-huge", lambda x: x[minidl.tensor([10 ** 12])], "index 1000000000000", "size 2"),
    ("getitem-two-tensors", lambda x: x[[0, 1], [1, 3]], "index 3", "size 3"),
    ("gather", lambda x: x.gather(1, minidl.tensor([[0, 3]])), "index 3", "size 3"),
    ("gather-negative", lambda x: x.gather(1, minidl.tensor([[0, -4]])), "index -4", "size 3"),
    ("index_select", lambda x: x.index_select(0, minidl.tensor([1, 2])), "index 2", "size 2"),
    ("scatter", lambda x: x.scatter(1, minidl.tensor([[5]]), minidl.ones(1, 1)), "index 5", "size 3"),
    ("scatter_add", lambda x: x.scatter_add(0, minidl.tensor([[2, 0, 0]]), minidl.ones(1, 3)), "index 2", "size 2"),
    ("index_add", lambda x: x.index_add(0, minidl.tensor([2]), minidl.ones(1, 3)), "index 2", "size 2"),
    ("take", lambda x: x.take(minidl.tensor([6])), "index 6", "size 6"),
    ("setitem-tensor", lambda x: x.__setitem__(minidl.tensor([3]), 1.0), "index 3", "size 2"),
    ("setitem-int", lambda x: x.__setitem__((0, 7), 1.0), "index 7", "size 3"),
    ("scatter_-inplace", lambda x: x.scatter_(0, minidl.tensor([[0, 9, 0]]), 1.0), "index 9", "size 2"),
    ("index_put_-accumulate", lambda x: x.index_put_((minidl.tensor([4]),), minidl.ones(3), accumulate=True),
     "index 4", "size 2"),
    ("narrow", lambda x: x.narrow(1, 2, 2), "narrow", "size 3"),
]


@pytest.mark.parametrize("fn,parts", [(c[1], c[2:]) for c in OUT_OF_RANGE], ids=[c[0] for c in OUT_OF_RANGE])
def test_out_of_range_index_raises_and_writes_nothing(x, fn, parts):
    """On the CPU the take/put kernels check the indices and raise at once, before any write."""
    before = x.numpy().copy()
    with pytest.raises(IndexError) as info:
        fn(x)
    _all_in(str(info.value), *parts)
    np.testing.assert_array_equal(x.numpy(), before)  # nothing was partially written


def test_kernel_spy_sees_kernels(x):
    with _KernelSpy() as spy:
        x[[0, 1]]
        x.scatter(0, minidl.tensor([[1, 0, 1]]), 5.0)
    assert spy.calls >= 2  # the gather and the scatter (and the kernels' range checks of their indices)


def test_out_of_range_index_in_subprocess_survives():
    """Huge and negative out-of-range indices must raise, not read or write wild memory."""
    script = textwrap.dedent("""
        import minidl
        x = minidl.arange(6.0).reshape(2, 3)
        big = minidl.tensor([0, 2 ** 40])
        for f in (lambda: x[big], lambda: x[:, big], lambda: x.gather(0, minidl.tensor([[-2 ** 40, 0, 0]])),
                  lambda: x.scatter_(1, minidl.tensor([[2 ** 40]]), 1.0), lambda: x.take(big),
                  lambda: x.index_select(1, big), lambda: x.__setitem__(big, 0.0),
                  lambda: x.index_add_(0, big, minidl.ones(2, 3))):
            try:
                f()
            except IndexError:
                print("IndexError")
            else:
                print("no error")
        print("survived", x.sum().item())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.split()
    assert lines.count("IndexError") == 8 and "no" not in lines, proc.stdout
    assert "survived" in proc.stdout and "15.0" in proc.stdout


def test_index_errors_of_structure(x):
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(IndexError) as info:
        x[minidl.tensor([True, False, True])]
    _all_in(str(info.value), "mask", "[3]", "[2, 3]")
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match="vector"):
        x.index_select(0, minidl.tensor([[0]]))
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        x.gather(1, minidl.tensor([0]))
    with pytest.raises(TypeError, match="invalid index"):
        x["a"]


# ----------------------------------------------------------------------------- wrong dtypes
@pytest.mark.parametrize("name,fn", [
    ("getitem", lambda x: x[minidl.tensor([0.0])]),
    ("getitem-list-float", lambda x: x[[0.0, 1.0]]),
    ("setitem", lambda x: x.__setitem__(minidl.tensor([1.0]), 0.0)),
    ("gather", lambda x: x.gather(1, minidl.tensor([[0.0]]))),
    ("index_select", lambda x: x.index_select(0, minidl.tensor([0.0]))),
    ("scatter", lambda x: x.scatter(0, minidl.tensor([[0.0]]), 1.0)),
    ("scatter_add", lambda x: x.scatter_add(0, minidl.tensor([[0.0]]), minidl.ones(1, 1))),
    ("index_add", lambda x: x.index_add(0, minidl.tensor([0.0]), minidl.ones(1, 3))),
    ("take", lambda x: x.take(minidl.tensor([0.0]))),
])
def test_float_index_tensors_raise_type_error(x, name, fn):
    with _KernelSpy() as spy:
        with pytest.raises(TypeError) as info:
            fn(x)
    assert spy.calls == 0
    _all_in(str(info.value), "float32")


def test_where_needs_bool_condition(x):
    with pytest.raises(TypeError) as info:
        minidl.where(x, x, x)
    _all_in(str(info.value), "where", "bool", "float32")
    with pytest.raises(TypeError):
        minidl.where(minidl.tensor([1, 0, 1]), x, 0.0)


def test_masks_must_be_bool(x):
    with pytest.raises(TypeError) as info:
        x.masked_fill(x, 0.0)
    _all_in(str(info.value), "masked_fill", "bool", "float32")
    with pytest.raises(TypeError) as info:
        x.masked_fill(minidl.tensor([1, 0, 1]), 0.0)
    _all_in(str(info.value), "masked_fill", "int64")
    with pytest.raises(TypeError, match="masked_select"):
        x.masked_select(x)
    with pytest.raises(TypeError):
        ~x  # bitwise not on float


def test_matmul_dtype_mismatch_names_dtypes(x):
    with pytest.raises(RuntimeError) as info:
        x @ minidl.ones(3, 2, dtype=minidl.float64)
    _all_in(str(info.value), "matmul", "float32", "float64")
    with pytest.raises(RuntimeError) as info:
        minidl.ones(2, 2, dtype=minidl.float64) @ minidl.ones(2, 2)
    _all_in(str(info.value), "float64", "float32")


def test_inplace_result_must_fit_target_dtype():
    t = minidl.tensor([1, 2])
    with pytest.raises(RuntimeError) as info:
        t.add_(1.5)
    _all_in(str(info.value), "add_", "float32", "int64")
    np.testing.assert_array_equal(t.numpy(), [1, 2])
    with pytest.raises(RuntimeError, match="can't be cast"):
        minidl.tensor([True, False]).mul_(minidl.tensor([2, 3]))


def test_unsupported_operands():
    x = minidl.ones(2)
    with pytest.raises(TypeError, match="str"):
        x + "a"
    with pytest.raises(TypeError):
        x * [1, 2]
    with pytest.raises(NotImplementedError, match="bitwise_and.*float32"):  # as torch: integer and bool tensors only
        x & x


def test_mean_of_integers(x):
    with pytest.raises(RuntimeError) as info:
        minidl.tensor([1, 2]).mean()
    _all_in(str(info.value), "mean", "int64")


# ----------------------------------------------------------------------------- autograd misuse
def test_backward_on_non_scalar_without_gradient():
    y = minidl.ones(2, 3, requires_grad=True) * 2
    with pytest.raises(RuntimeError) as info:
        y.backward()
    _all_in(str(info.value), "scalar", "[2, 3]")


def test_requires_grad_on_integer_tensors():
    for make in (lambda: minidl.tensor([1, 2]).requires_grad_(), lambda: minidl.tensor([1, 2], requires_grad=True),
                 lambda: minidl.zeros(2, dtype=minidl.int64, requires_grad=True),
                 lambda: minidl.arange(3, requires_grad=True), lambda: minidl.tensor([True]).requires_grad_()):
        with pytest.raises(RuntimeError) as info:
            make()
        assert "floating point" in str(info.value)


def test_tensor_conversions_with_clear_messages(x):
    with pytest.raises(RuntimeError, match="6 elements"):
        x.item()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(x)
    with pytest.raises(RuntimeError, match="detach"):
        minidl.ones(2, requires_grad=True).numpy()
    with pytest.raises(TypeError, match="0-d"):
        len(minidl.tensor(1.0))


def test_misc_argument_errors(x):
    with pytest.raises(NotImplementedError, match="pad: mode 'symmetric'"):
        minidl.pad(x, (1, 1), mode="symmetric")
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        minidl.arange(0, 5, 0)
    with pytest.raises(TypeError, match="floating point"):
        minidl.set_default_dtype(minidl.int64)
    with pytest.raises(RuntimeError, match="min.*max"):
        x.clamp()
    with pytest.raises(RuntimeError, match="roll"):
        x.roll((1, 2), (0,))
    with pytest.raises(RuntimeError, match="amax"):
        minidl.ones(0).amax()
    with pytest.raises(ValueError, match="rounding_mode"):
        minidl.div(x, 2, rounding_mode="up")


def test_integer_to_negative_integer_power_raises():
    with pytest.raises(RuntimeError, match="negative integer powers"):
        minidl.tensor([1, 2]) ** -1
    assert minidl.tensor([2, 3]).pow(2).tolist() == [4, 9]


def test_writing_into_read_only_numpy_memory_raises():
    array = np.broadcast_to(np.zeros(3, np.float32), (2, 3))
    with pytest.warns(UserWarning, match="not writable"):
        t = minidl.from_numpy(array)
    for write in (lambda: t.fill_(1.0), lambda: t.add_(1.0), lambda: t.__setitem__(0, 2.0)):
        with pytest.raises(RuntimeError, match="read-only"):
            write()
    assert np.array_equal((t + 1).numpy(), np.ones((2, 3), np.float32))


def test_negative_sizes_are_rejected_before_any_kernel():
    with pytest.raises(RuntimeError, match="non-negative"):
        minidl.as_strided(minidl.arange(6.0), (-2, -3), (10, 10))
    with pytest.raises(RuntimeError, match="invalid size"):
        minidl.ones(1).expand(-2)


def test_copies_from_overlapping_memory_read_the_old_values():
    x = minidl.arange(9.0).reshape(3, 3)
    x.copy_(x.t())
    assert x.numpy().tolist() == np.arange(9.0).reshape(3, 3).T.tolist()
    y = minidl.arange(10000.0)
    y[1:] = y[:-1]                          # longer than one kernel chunk
    assert np.array_equal(y.numpy(), np.concatenate([[0.0], np.arange(9999.0)]))


def test_per_element_writes_into_expanded_tensors_raise_but_fills_do_not():
    for write in (lambda t: t.add_(1), lambda t: t.mul_(2), lambda t: t.copy_(minidl.ones(3))):
        with pytest.raises(RuntimeError, match="single memory location"):
            write(minidl.zeros(1).expand(3))
    t = minidl.zeros(1).expand(3)
    t.fill_(2.0)
    assert t.tolist() == [2, 2, 2]


def test_random_fills_refuse_leaves_that_require_grad():
    with pytest.raises(RuntimeError, match="leaf Variable"):
        minidl.ones(3, requires_grad=True).uniform_()


def test_index_add_source_must_match_the_input_outside_the_indexed_dim():
    x = minidl.zeros(3, 4)
    with pytest.raises(RuntimeError, match="index_add"):
        x.index_add(0, minidl.tensor([0, 2]), minidl.ones(2, 3))
    out = x.index_add(0, minidl.tensor([0, 2, 0]), minidl.ones(3, 4))
    assert out.numpy().tolist() == [[2.0] * 4, [0.0] * 4, [1.0] * 4]
