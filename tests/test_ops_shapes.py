"""The numpy-style shape ops, the windows view and the *_copy ops (issue 44), where the op corpus and
the registry sweeps do not look: which results are views of their input and which are copies, the
forms torch accepts beside the corpus's, and the errors, each naming the op and the sizes."""
import numpy as np
import pytest
import torch

import minidl
from minidl.onnx import OnnxExporterError

A = np.arange(24, dtype=np.float64).reshape(4, 6)


def pair():
    return minidl.tensor(A), torch.tensor(A)


def same(got, want):
    """minidl's result (a tensor or a tuple of them) equals torch's, shapes and dtypes included."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
        return
    assert tuple(got.shape) == tuple(want.shape) and str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("make", [
    lambda m, x: m.select(x, 1, -2), lambda m, x: x.unfold(1, 4, 1), lambda m, x: x.ravel(),
    lambda m, x: m.tensor_split(x, [1, 3], 1)[1], lambda m, x: m.hsplit(x, 3)[2], lambda m, x: m.vsplit(x, 2)[0],
    lambda m, x: x.H, lambda m, x: x.mH, lambda m, x: m.moveaxis(x, 0, 1), lambda m, x: m.atleast_3d(x),
    lambda m, x: m.split_with_sizes(x, [2, 4], 1)[1]], ids=["select", "unfold", "ravel", "tensor_split", "hsplit",
                                                           "vsplit", "H", "mH", "moveaxis", "atleast_3d",
                                                           "split_with_sizes"])
def test_views_share_their_input_memory_as_torch_s(make):
    """A write into the input shows through the result (and the result is a view), as in torch."""
    x, tx = pair()
    v, tv = make(minidl, x), make(torch, tx)
    assert v._base is x and tv._base is tx
    x.mul_(-1)
    tx.mul_(-1)
    same(v, tv)


def test_unsafe_split_and_chunk_share_the_input_memory():
    """torch's unsafe_* pieces are no autograd views, but they do share the input's memory (minidl's
    are views: the same memory, with the in-place checks of views)."""
    x, tx = pair()
    got, want = x.unsafe_split(3)[1], tx.unsafe_split(3)[1]
    got_chunk, want_chunk = x.unsafe_chunk(3, 1)[2], tx.unsafe_chunk(3, 1)[2]
    x.add_(1)
    tx.add_(1)
    same(got, want)
    same(got_chunk, want_chunk)


@pytest.mark.parametrize("name, args", [
    ("alias_copy", ()), ("t_copy", ()), ("narrow_copy", (1, 2, 3)), ("unfold_copy", (0, 2, 1)),
    ("view_copy", ((6, 4),)), ("expand_copy", ((2, 4, 6),)), ("permute_copy", ((1, 0),)),
    ("diagonal_copy", (1,)), ("as_strided_copy", ((2, 2), (1, 6))), ("squeeze_copy", (0,)),
    ("unsqueeze_copy", (1,)), ("transpose_copy", (0, 1)), ("unbind_copy", (1,)),
    ("split_with_sizes_copy", ([1, 3], 0))])
def test_the_copy_ops_own_their_memory(name, args):
    """The *_copy ops give torch's values, packed, in memory of their own: a later write into the
    input changes nothing."""
    x, tx = pair()
    got, want = getattr(minidl, name)(x, *args), getattr(torch, name)(tx, *args)
    x.fill_(0)
    same(got, want)
    for g in got if isinstance(got, tuple) else (got,):
        assert g._base is None and g.is_contiguous()


def test_identities_of_real_tensors_are_the_tensor_itself():
    x = minidl.tensor(A)
    for f in (minidl.real, minidl.conj, minidl.conj_physical, minidl.resolve_conj, minidl.resolve_neg):
        assert f(x) is x
    assert x.real is x and x.conj() is x and x.resolve_neg() is x
    with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex dtypes"):
        x.imag
    with pytest.raises(RuntimeError, match="imag is not implemented"):
        minidl.imag(x)


def test_unfold_is_the_windows_view_and_nn_functional_unfold_stays_im2col():
    assert not hasattr(minidl, "unfold") and not hasattr(torch, "unfold")
    x, tx = pair()
    same(x.unfold(0, 3, 1), tx.unfold(0, 3, 1))
    image = np.arange(32.0).reshape(1, 2, 4, 4)
    same(minidl.nn.functional.unfold(minidl.tensor(image), 2), torch.nn.functional.unfold(torch.tensor(image), 2))


def test_unfold_gradient_sums_over_overlapping_windows():
    """Each element's gradient counts every window that holds it (torch's as oracle)."""
    x, tx = (t.requires_grad_() for t in pair())
    weights = np.random.default_rng(0).standard_normal((4, 4, 3))
    (x.unfold(1, 3, 1) * minidl.tensor(weights)).sum().backward()
    (tx.unfold(1, 3, 1) * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_atleast_returns_the_input_when_it_has_the_rank_and_tuples_for_several():
    x = minidl.tensor(A)
    assert minidl.atleast_1d(x) is x and minidl.atleast_2d(x) is x
    for f in ("atleast_1d", "atleast_2d", "atleast_3d"):
        for args in [(minidl.tensor(2.0),), (minidl.tensor([1.0, 2.0]), x), ([x],)]:
            want = getattr(torch, f)(*[[torch.tensor(t.numpy()) for t in a] if isinstance(a, list) else
                                       torch.tensor(a.numpy()) for a in args])
            same(getattr(minidl, f)(*args), want)


@pytest.mark.parametrize("call", [
    lambda m, x: m.repeat_interleave(m.tensor([3, 0, 2])),
    lambda m, x: m.repeat_interleave(m.tensor([1, 2]), output_size=3),
    lambda m, x: x.repeat_interleave(m.tensor([2]), dim=1),
    lambda m, x: x.repeat_interleave(m.tensor(2)),
    lambda m, x: x.repeat_interleave(0, dim=0),
    lambda m, x: m.tensor_split(x, m.tensor(4), dim=1),
    lambda m, x: m.tensor_split(x, m.tensor([-1, 2]), dim=1),
    lambda m, x: m.tensor_split(x, (7, 9)),
    lambda m, x: m.hsplit(x[0], [2, 5]),
    lambda m, x: m.row_stack([x[0], x]),
    lambda m, x: m.column_stack([x[:, 0], x[:, :2]]),
    lambda m, x: m.hstack([x[0], m.tensor([1.5])]),
    lambda m, x: x.tile(2),
    lambda m, x: x.sum_to_size(6),
    lambda m, x: x.sum_to_size(1, 1),
    lambda m, x: m.rot90(x, -3, [1, 0]),
    lambda m, x: m.select(m.tensor([[1, 2], [3, 4]]), -1, 0),
])
def test_forms_beside_the_corpus_s_as_torch(call):
    x, tx = pair()
    same(call(minidl, x), call(torch, tx))


@pytest.mark.parametrize("call, message", [
    (lambda m, x: m.select(m.tensor(1.0), 0, 0), r"select\(\) cannot be applied to a 0-dim tensor"),
    (lambda m, x: x.select(1, 6), r"index 6 out of range for tensor of size \[4, 6\] at dimension 1"),
    (lambda m, x: x.unfold(1, 7, 1), r"maximum size for tensor at dimension 1 is 6 but size is 7"),
    (lambda m, x: x.unfold(1, 2, 0), r"step is 0 but must be > 0"),
    (lambda m, x: m.rot90(x, 1, (1, 1)), "expected rotation dims to be different"),
    (lambda m, x: m.rot90(x[0]), "expected total dims >= 2, but got total dims = 1"),
    (lambda m, x: m.rot90(x, 1, (0, 1, 2)), "expected total rotation dims == 2"),
    (lambda m, x: m.fliplr(x[0]), "Input must be >= 2-d"),
    (lambda m, x: m.flipud(x[0, 0]), "Input must be >= 1-d"),
    (lambda m, x: m.hsplit(x, 4), "dimension 1, but the size of the dimension 6 is not divisible by the "
                                  "split_size 4"),
    (lambda m, x: m.dsplit(x, 2), "dsplit requires a tensor with at least 3 dimension, but got a tensor with 2"),
    (lambda m, x: m.tensor_split(x, 0), "number of sections must be larger than 0, got 0"),
    (lambda m, x: m.tensor_split(x, m.tensor([1.0])), "to have dtype of long"),
    (lambda m, x: m.tensor_split(x, m.tensor([[1]])), "zero-dimensional or one-dimensional tensor"),
    (lambda m, x: x.repeat_interleave(m.tensor([1, 2]), dim=0), "repeats must have the same size as input "
                                                                 "along dim"),
    (lambda m, x: x.repeat_interleave(-1), "(?i)repeats must be non-negative"),
    (lambda m, x: m.repeat_interleave(m.tensor([1, -1])), "repeats can not be negative"),
    (lambda m, x: x.sum_to_size(2, 6), r"size \{?\[2, 6\]\}? is not expandable to size \{?\[4, 6\]"),
    (lambda m, x: x[0].H, "tensor.H is only supported on matrices"),
    (lambda m, x: x[0].mH, "tensor.mH is only supported on matrices or batches of matrices"),
    (lambda m, x: m.hstack([]), "hstack expects a non-empty TensorList"),
])
def test_errors_name_the_op_and_the_sizes_as_torch_s(call, message):
    """The message torch gives (torch raising the same is the oracle that the input is bad)."""
    x, tx = pair()
    with pytest.raises((RuntimeError, IndexError), match=message):
        call(torch, tx)
    with pytest.raises((RuntimeError, IndexError), match=message):
        call(minidl, x)


def test_repeat_interleave_refuses_an_output_size_that_does_not_match():
    with pytest.raises(RuntimeError, match="repeat_interleave: output_size=4 does not match the repeated size 3"):
        minidl.repeat_interleave(minidl.tensor([1, 2]), output_size=4)
    with pytest.raises(RuntimeError, match="repeats must be an integer tensor, got minidl.float32"):
        minidl.tensor(A).repeat_interleave(minidl.tensor([1.0, 2.0, 0.0, 1.0]), dim=0)


def test_repeat_interleave_with_counts_the_export_cannot_fix_is_refused_clearly():
    """Counts that are a traced input make the output size depend on the data: a clear export error."""
    def model(x, counts):
        return x.repeat_interleave(counts, dim=0)
    with pytest.raises(OnnxExporterError, match="repeat_interleave with traced counts"):
        minidl.onnx.export(model, (minidl.ones(3, 2), minidl.tensor([1, 0, 2])))


def test_sum_to_size_of_integers_to_no_dims_sums_in_int64_in_onnx_too():
    """Size () sums (even a 0-d tensor), and a sum of integers is int64, as torch's; the export agrees."""
    x = minidl.tensor([[1, 2], [3, 4]], dtype=minidl.int32)
    assert x.sum_to_size(()).dtype == minidl.int64 and x[0, 0].sum_to_size(()).dtype == minidl.int64
    assert torch.tensor(5, dtype=torch.int32).sum_to_size(()).dtype == torch.int64
    program = minidl.onnx.export(lambda t: t.sum_to_size(1, 2), (x,))
    (got,) = program(x)
    assert got.dtype == np.int64 and got.tolist() == [[4, 6]]


@pytest.mark.parametrize("offset, dim1, dim2", [(0, 0, 1), (-2, 2, 0), (1, -1, 1), (5, 0, 2)])
def test_diagonal_copy_exports_as_torch_computes(offset, dim1, dim2):
    values = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    program = minidl.onnx.export(lambda t: minidl.diagonal_copy(t, offset, dim1, dim2), (minidl.tensor(values),))
    (got,) = program(minidl.tensor(values))
    np.testing.assert_array_equal(got, torch.diagonal_copy(torch.tensor(values), offset, dim1, dim2).numpy())


def test_as_strided_copy_of_a_view_is_refused_by_the_export():
    """A graph value has no storage beyond its own elements: as_strided_copy of a slice cannot be lowered."""
    with pytest.raises(OnnxExporterError, match="as_strided_copy of a tensor that is not its whole storage"):
        minidl.onnx.export(lambda t: minidl.as_strided_copy(t[1:], (2,), (1,)), (minidl.ones(4),))


def test_exports_follow_a_dynamic_batch_size():
    """Exported with a dynamic dim 0, the lowerings read sizes from the graph: run at another size,
    ONNX Runtime gives torch's results."""
    def model(m, x):
        return x.repeat_interleave(2, dim=0), m.atleast_3d(x), x.tile(1, 2), m.hstack([x, x]), x.ravel()
    program = minidl.onnx.export(lambda x: model(minidl, x), (minidl.ones(3, 4),), input_names=["x"],
                                 dynamic_axes={"x": {0: "n"}})
    values = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    for got, want in zip(program(minidl.tensor(values)), model(torch, torch.tensor(values))):
        np.testing.assert_array_equal(got, want.numpy())
