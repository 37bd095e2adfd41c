"""Where PyTorch computes and minidl used to raise (issue 37, item 3): the gather family with a 0-d input or
index beside a 1-d one (and index_fill's negative indices), transpose of a 0-d tensor, scatter's reduce,
masks and clamp bounds that broadcast the input up. Forward values, dtypes and gradients against PyTorch."""
from __future__ import annotations

import numpy as np
import pytest
from test_torch_compare import DTYPES, T, _run, pos, rn

import minidl

torch = pytest.importorskip("torch")

MASK_2x1 = [[True], [False]]

CASES = [
    ("gather-0d-index", lambda m, x: x.gather(0, T(m, 2)), [rn(4)]),
    ("gather-0d-input", lambda m, x: x.gather(0, T(m, [0, 0])), [np.array(1.5)]),
    ("gather-0d-both", lambda m, x: x.gather(-1, T(m, 0)), [np.array(1.5)]),
    ("scatter-0d-index", lambda m, x, s: x.scatter(0, T(m, 2), s), [rn(4), np.array(0.7)]),
    ("scatter-0d-input", lambda m, x, s: x.scatter(0, T(m, [0]), s), [np.array(1.5), rn(1)]),
    ("scatter-value-0d-both", lambda m, x: x.scatter(0, T(m, 0), 3.0), [np.array(1.5)]),
    ("scatter_add-0d-input-dups", lambda m, x, s: x.scatter_add(0, T(m, [0, 0]), s), [np.array(1.5), rn(2)]),
    ("scatter_add-0d-index", lambda m, x, s: m.scatter_add(x, 0, T(m, 3), s), [rn(4), np.array(0.7)]),
    ("index_add-0d-input", lambda m, x, s: x.index_add(0, T(m, [0]), s, alpha=2.0), [np.array(1.5), np.array(0.3)]),
    ("index_add-0d-both", lambda m, x, s: x.index_add(-1, T(m, 0), s), [np.array(1.5), np.array(0.3)]),
    ("index_copy-0d-index-0d-source", lambda m, x, s: x.index_copy(0, T(m, 2), s), [rn(4), np.array(0.3)]),
    ("index_copy-0d-input-1d-source", lambda m, x, s: x.index_copy(0, T(m, [0]), s), [np.array(1.5), rn(1)]),
    ("index_fill-0d-input", lambda m, x: (x.index_fill(0, T(m, [0]), 2.0), x.index_fill(0, T(m, 0), -1.0)),
     [np.array(1.5)]),
    ("index_fill-negative-index", lambda m, x: x.index_fill(1, T(m, [-1, 0]), 2.0), [rn(2, 3)]),
    ("index_select-0d-input", lambda m, x: (x.index_select(0, T(m, [0])), x.index_select(-1, T(m, 0))),
     [np.array(1.5)]),
    ("transpose-0d", lambda m, x: (x.transpose(0, 0) * 2, x.transpose(-1, 0), x.swapaxes(0, -1)), [np.array(1.5)]),
    ("masked_fill-mask-broadcasts-input", lambda m, x, v: (x.masked_fill(T(m, MASK_2x1), 0.5),
                                                           m.masked_fill(x, T(m, MASK_2x1), v)),
     [rn(3), np.array(2.0)]),
    ("masked_scatter-mask-broadcasts-input", lambda m, x, s: x.masked_scatter(T(m, MASK_2x1), s), [rn(3), rn(7)]),
    ("clamp_min-bound-broadcasts-input", lambda m, x, lo: x.clamp_min(lo), [rn(3), rn(2, 1)]),
    ("clamp_max-bound-broadcasts-input", lambda m, x, hi: m.clamp_max(x, hi), [rn(3), rn(2, 1)]),
    ("clamp-bounds-broadcast-input", lambda m, x, lo, hi: x.clamp(lo, hi), [rn(3) * 3, -pos(2, 1), pos(2, 1)]),
]

# PyTorch has no derivative for scatter with a reduce: forward only
FORWARD_CASES = [
    ("scatter-multiply-dups", lambda m, x, s: x.scatter(0, T(m, [[0, 1, 0], [0, 0, 0]]), s, reduce="multiply"),
     [rn(2, 3), rn(2, 3)]),
    ("scatter-multiply-value-noncontiguous", lambda m, x: x.t().scatter(1, T(m, [[0, 1], [0, 0]]), 3.0,
                                                                        reduce="multiply"), [rn(2, 3)]),
    ("scatter-add-value", lambda m, x: x.scatter(1, T(m, [[0, 0], [2, 1]]), 0.5, reduce="add"), [rn(2, 3)]),
]


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(case, dtype_name):
    _run(case, dtype_name)


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("case", FORWARD_CASES, ids=[c[0] for c in FORWARD_CASES])
def test_forward_matches_torch(case):
    _run(case, "float64", check_grad=False)


def test_scatter_reduce_integer_and_errors():
    x = np.arange(1, 7).reshape(2, 3)
    index = [[0, 1, 0], [0, 0, 0]]
    expected = torch.tensor(x).scatter(0, torch.tensor(index), 3, reduce="multiply")
    out = minidl.tensor(x).scatter(0, minidl.tensor(index), 3, reduce="multiply")
    assert out.dtype is minidl.int64
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    with pytest.raises(RuntimeError, match="'add' or 'multiply'.*'max'"):
        minidl.tensor(x).scatter(0, minidl.tensor(index), 3, reduce="max")
    leaf = minidl.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="reduce='multiply' is not implemented"):
        leaf.scatter(0, minidl.tensor(index), 2.0, reduce="multiply").sum().backward()


@pytest.mark.parametrize("name, call", [
    ("masked_fill_", lambda x, mask: x.masked_fill_(mask, 0.0)),
    ("masked_scatter_", lambda x, mask: x.masked_scatter_(mask, minidl.ones(6))),
])
def test_in_place_mask_may_not_broadcast_input_up(name, call):
    """Out of place the result takes the broadcast shape; in place it cannot (PyTorch raises too)."""
    with pytest.raises(RuntimeError, match=rf"{name}: output with shape \[3\] doesn't match the broadcast shape "
                                           rf"\[2, 3\]"):
        call(minidl.zeros(3), minidl.tensor(MASK_2x1))


@pytest.mark.parametrize("call, message", [
    (lambda x0: x0.index_select(0, minidl.tensor([0, 0])), "Index to scalar can have only 1 value, got 2"),
    (lambda x0: x0.index_add(0, minidl.tensor([0]), minidl.ones(1)), "does not fit a 0-d input"),
    (lambda x0: x0.gather(0, minidl.tensor([1])), "out of bounds"),
    (lambda x0: x0.transpose(0, 1), "dimension out of range"),
])
def test_0d_input_errors_where_torch_errors(call, message):
    with pytest.raises((RuntimeError, IndexError), match=message):
        call(minidl.tensor(5.0))
