"""What PyTorch's op corpus (tests/op_corpus.py) found after issue 37's listed fixes, each compared with
torch itself: the conversions' memory_format, torch.zero_, uint8 any/all and logsumexp, an empty gather
index, an empty 1-D batch_norm, cdist's p=0 gradient, backward from a sparse tensor, einsum's mixed
integer widths, matmul over an empty inner dimension."""
import numpy as np
import pytest

import minidl

torch = pytest.importorskip("torch")


def _same(ours, theirs):
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-6)


def _both(values, dtype="float64", requires_grad=False):
    return (minidl.tensor(values, dtype=getattr(minidl, dtype), requires_grad=requires_grad),
            torch.tensor(values, dtype=getattr(torch, dtype), requires_grad=requires_grad))


@pytest.mark.parametrize("method", ["float", "double", "half", "bfloat16", "long", "int", "short", "byte", "bool"])
@pytest.mark.parametrize("format_name", ["contiguous_format", "preserve_format", "channels_last"])
def test_conversions_take_memory_format_as_torch(method, format_name):
    x = np.arange(36.0).reshape(2, 3, 2, 3)
    ours = getattr(minidl.tensor(x), method)(memory_format=getattr(minidl, format_name))
    theirs = getattr(torch.tensor(x), method)(memory_format=getattr(torch, format_name))
    assert ours.stride() == theirs.stride()
    _same(ours.float(), theirs.float())


def test_zero_is_a_function_too():
    ours, theirs = _both([[1, 2], [3, 4]], "int32")
    assert minidl.zero_(ours) is ours
    _same(ours, torch.zero_(theirs))


@pytest.mark.parametrize("call", [lambda lib, x: lib.any(x), lambda lib, x: lib.all(x, 0, keepdim=True),
                                  lambda lib, x: x.any(dim=1), lambda lib, x: lib.logsumexp(x, 1)])
def test_uint8_reductions_answer_as_torch(call):
    ours, theirs = _both([[0, 200, 255], [3, 0, 250]], "uint8")
    _same(call(minidl, ours), call(torch, theirs))


def test_gather_with_an_empty_index_of_any_rank_is_empty():
    ours, theirs = _both([1.0, 2.0, 3.0], requires_grad=True)
    index = np.zeros((2, 0), dtype=np.uint8)
    out, expected = minidl.gather(ours, 0, minidl.tensor(index)), torch.gather(theirs, 0, torch.tensor(index))
    _same(out, expected)
    assert out.requires_grad


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_an_empty_1d_input_is_empty(training):
    f, tf = minidl.nn.functional, torch.nn.functional
    _same(f.batch_norm(minidl.zeros(0), minidl.zeros(0), minidl.ones(0), training=training),
          tf.batch_norm(torch.zeros(0), torch.zeros(0), torch.ones(0), training=training))
    with pytest.raises(ValueError, match="batch_norm"):
        f.batch_norm(minidl.zeros(3), minidl.zeros(3), minidl.ones(3), training=training)


def test_cdist_and_norm_with_p_0_count_nonzeros_with_a_zero_gradient():
    values = [[0.0, 1.5, -2.0], [3.0, 0.0, 0.0]]
    (a, ta), (b, tb) = _both(values, requires_grad=True), _both(values[::-1], requires_grad=True)
    out, expected = minidl.cdist(a, b, p=0), torch.cdist(ta, tb, p=0)
    _same(out, expected)
    out.sum().backward()
    expected.sum().backward()
    _same(a.grad, ta.grad)
    n = minidl.norm(a, 0)
    assert n.requires_grad and n.item() == torch.norm(ta, 0).item()


def test_backward_starts_from_a_sparse_tensor_as_torch():
    values = [[0.0, 2.0, 0.0], [1.5, 0.0, -3.0]]
    cotangent = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    for args in ((), (1,)):
        x, tx = _both(values, requires_grad=True)
        (grad,) = minidl.autograd.grad(x.to_sparse(*args), x, minidl.tensor(cotangent, dtype=minidl.float64))
        (expected,) = torch.autograd.grad(tx.to_sparse(*args), tx, torch.tensor(cotangent, dtype=torch.float64))
        _same(grad, expected.to_dense())


def test_einsum_of_int32_operands_widens_as_torch():
    (a, ta), (b, tb) = _both(np.arange(6).reshape(1, 2, 3).tolist(), "int32"), _both([1, 2, 3], "int32")
    _same(minidl.einsum("...ik, ...j -> ij", a, b), torch.einsum("...ik, ...j -> ij", ta, tb))
    (c, tc) = _both(np.arange(6).reshape(3, 2).tolist(), "int32")
    _same(minidl.einsum("bij,jk->ik", a, c), torch.einsum("bij,jk->ik", ta, tc))


@pytest.mark.parametrize("shapes", [((2, 3, 0), (0, 4)), ((3, 0), (0, 4)), ((2, 3, 0), (0,)), ((0,), (0, 2))])
def test_matmul_over_an_empty_inner_dimension_is_zeros_as_torch(shapes):
    (a, ta), (b, tb) = (_both(np.ones(s), requires_grad=True) for s in shapes)
    ours, theirs = a @ b, ta @ tb
    _same(ours, theirs)
    ours.sum().backward()
    theirs.sum().backward()
    _same(a.grad, ta.grad)
    _same(b.grad, tb.grad)
