"""Ops whose ONNX lowering needs a size: exported with a dynamic axis at one size, run in ONNX Runtime at
another, they give minidl's eager values and shapes; where a lowering cannot follow the size, the export
warns naming the op, and what ONNX cannot compute (random draws, traced split points) is refused naming it."""
import warnings

import numpy as np
import pytest

import minidl
from minidl.onnx import TracerWarning

TRACED, LATER = 4, (6, 7)


def _follows(fn, *inputs):
    """Export ``fn`` with every input's axis 0 dynamic (no TracerWarning allowed), then check it at LATER
    sizes of those axes against minidl eager."""
    names = [f"in{k}" for k in range(len(inputs))]
    with warnings.catch_warnings():
        warnings.simplefilter("error", TracerWarning)
        program = minidl.onnx.export(fn, tuple(make(TRACED) for make in inputs), input_names=names,
                                     dynamic_axes={n: {0: f"{n}_rows"} for n in names})
    for n in LATER:
        args = [make(n) for make in inputs]
        got, want = program(*args)[0], fn(*args).numpy()
        assert got.shape == want.shape, (n, got.shape, want.shape)
        assert np.allclose(got, want, atol=1e-6), n


def _rows(n):
    return minidl.randn(n, 3)


@pytest.mark.parametrize("fn", [lambda x: x.median(), lambda x: x.median(0)[0], lambda x: x.median(0)[1],
                                lambda x: x.t().median(1, keepdim=True)[0]],
                         ids=["all", "dim0-values", "dim0-indices", "dim1-keepdim"])
def test_median_takes_its_k_from_the_size_it_is_run_at(fn):
    _follows(fn, _rows)


@pytest.mark.parametrize("size, step", [(2, 1), (2, 2), (3, 2)])
def test_unfold_makes_as_many_windows_as_the_size_run_at_holds(size, step):
    _follows(lambda x: x.unfold(0, size, step), _rows)
    _follows(lambda x: x.t().unfold(1, size, step), _rows)


def test_index_put_wraps_negative_indices_by_the_size_run_at():
    where = minidl.tensor([-1, 0, -2])
    _follows(lambda x: minidl.index_put(x, (where,), minidl.tensor(9.0)), _rows)
    _follows(lambda x: minidl.index_put(x, (where,), minidl.tensor(1.0), accumulate=True), _rows)


def test_index_put_broadcasts_indices_of_the_size_run_at():
    def index(n):   # (distinct rows: ScatterND's order among duplicates is left open)
        return minidl.arange(n) - 2

    def fn(x, i):
        return minidl.index_put(x, (i, minidl.tensor([1])), i.to(minidl.float32) * 10)
    _follows(fn, lambda n: minidl.randn(n, 3), index)


@pytest.mark.parametrize("fn", [
    lambda x: minidl.diag_embed(x), lambda x: minidl.diag_embed(x.t(), 1), lambda x: minidl.diag_embed(x, -2, 0, 2),
    lambda x: minidl.diag_embed(x.t(), 1, 2, 0), lambda x: minidl.diagflat(x), lambda x: minidl.diagflat(x, -1)],
    ids=["last-dims", "offset", "negative-offset-outer-dims", "dims-reversed", "diagflat", "diagflat-offset"])
def test_diag_embed_and_diagflat_make_matrices_of_the_size_run_at(fn):
    _follows(fn, _rows)


def test_block_diag_places_blocks_by_the_sizes_run_at():
    _follows(lambda x: minidl.block_diag(minidl.ones(2, 2), x, x[:, 0], minidl.tensor(5.0), x.t()), _rows)
    _follows(lambda x, y: minidl.block_diag(y, x), _rows, lambda n: minidl.randn(n - 1))


@pytest.mark.parametrize("fn", [
    lambda x: minidl.select_scatter(x, minidl.zeros(x.shape[0]), 1, -1),
    lambda x: minidl.select_scatter(x, minidl.zeros(3), 0, -2),
    lambda x: minidl.slice_scatter(x, minidl.zeros(x.shape[0], 1), 1, 1, 2),
    lambda x: minidl.slice_scatter(x, minidl.zeros(2, 3), 0, -3, -1),
    lambda x: minidl.slice_scatter(x, minidl.zeros((x.shape[0] + 1) // 2, 3), 0, None, None, 2),
    lambda x: minidl.slice_scatter(x, minidl.zeros(x.shape[0], 2), 1, -2),
    lambda x: minidl.diagonal_scatter(x, minidl.zeros(3)),
    lambda x: minidl.diagonal_scatter(x, minidl.zeros(3), -1),
    lambda x: minidl.diagonal_scatter(x.t(), minidl.ones(2), -1),
    lambda x: minidl.diagonal_scatter(minidl.stack([x, x * 2]), minidl.ones(x.shape[0], 1), 1, 2, 0)],
    ids=["select-dim1", "select-dim0-negative", "slice-dim1", "slice-negative", "slice-step", "slice-to-end",
         "diagonal", "diagonal-below", "diagonal-of-wide", "diagonal-dims-reversed"])
def test_region_scatters_write_where_the_size_run_at_puts_them(fn):
    _follows(fn, _rows)


@pytest.mark.parametrize("name, fn", [
    ("slice_scatter", lambda x: minidl.slice_scatter(x, minidl.zeros(x.shape[0], 1), 1, -9, 1)),   # (start clamped)
    ("as_strided_scatter", lambda x: minidl.as_strided_scatter(x, minidl.zeros(2), (2,), (1,))),
])
def test_a_lowering_that_fixes_the_traced_sizes_warns_naming_the_op(name, fn):
    with pytest.warns(TracerWarning, match=f"{name} of a traced tensor .* will not follow other sizes"):
        program = minidl.onnx.export(fn, (_rows(TRACED),), input_names=["x"], dynamic_axes={"x": {0: "b"}})
    x = _rows(TRACED)   # (at the traced size the graph stays right)
    assert np.allclose(program(x)[0], fn(x).numpy())


def test_the_same_ops_on_constants_do_not_warn():
    fixed = minidl.randn(3, 3)

    def fn(x):
        return x + minidl.diagonal_scatter(fixed, minidl.ones(3)).sum()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TracerWarning)
        program = minidl.onnx.export(fn, (_rows(TRACED),), input_names=["x"], dynamic_axes={"x": {0: "b"}})
    x = _rows(LATER[0])
    assert np.allclose(program(x)[0], fn(x).numpy(), atol=1e-6)


def test_as_strided_scatter_of_a_view_is_refused_naming_the_op():
    """Its region addresses the input's storage, which ONNX does not have: a transposed input is refused."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TracerWarning)
        with pytest.raises(minidl.onnx.OnnxExporterError, match="as_strided_scatter of a view"):
            minidl.onnx.export(lambda x: minidl.as_strided_scatter(x.t(), minidl.zeros(2, 2), (2, 2), (1, 2)),
                               (minidl.randn(4, 3),))


@pytest.mark.parametrize("fn, message", [
    (lambda x: minidl.nn.functional.rrelu(x, training=True), "rrelu in training draws a random slope"),
    (lambda x: minidl.tensor_split(x, (x[:, 0] > 9).long().cumsum(0)[:1] + 1)[0], "tensor_split at traced indices"),
])
def test_what_onnx_cannot_compute_is_refused_naming_the_op(fn, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TracerWarning)
        with pytest.raises(minidl.onnx.OnnxExporterError, match=message):
            minidl.onnx.export(fn, (_rows(TRACED),))
