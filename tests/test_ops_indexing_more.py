"""Indexing and arranging ops of issue 44 where the corpus and the registry sweeps do not look: gradients
at ties and zeros, an input gradient torch gets wrong, the refusals and their messages, in-place twins,
the factories' integer cases, and ONNX lowerings of integer and negative indices. Oracles: torch, closed
forms and ONNX Runtime."""
import io

import numpy as np
import onnxruntime
import pytest
import torch

import minidl


def md(t, grad=False):
    """A minidl copy of a torch tensor (a leaf that requires grad when ``grad``)."""
    out = minidl.tensor(t.detach().numpy())
    return out.requires_grad_(True) if grad else out


def grads_of(fn_torch, fn_minidl, *inputs):
    """(torch's, minidl's) gradients of sum(out * weights) by each float64 input."""
    leaves_t = [t.clone().requires_grad_(True) for t in inputs]
    leaves_m = [md(t, grad=True) for t in inputs]
    out_t, out_m = fn_torch(*leaves_t), fn_minidl(*leaves_m)
    np.testing.assert_allclose(out_m.detach().numpy(), out_t.detach().numpy(), rtol=1e-12)
    weights = torch.arange(1.0, out_t.numel() + 1, dtype=torch.float64).reshape(out_t.shape)
    want = torch.autograd.grad((out_t * weights).sum(), leaves_t)
    got = minidl.autograd.grad((out_m * md(weights)).sum(), leaves_m)
    return [w.numpy() for w in want], [g.numpy() for g in got]


INDEX = torch.tensor([[0, 0, 1], [1, 1, 1]])


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_extreme_ties_share_the_gradient_as_torch(reduce, include_self):
    """Equal elements (x's own too, even when it takes no part) share a place's gradient evenly."""
    x = torch.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    src = torch.tensor([[2.0, 2.0, 1.0], [3.0, 3.0, 0.5]], dtype=torch.float64)
    want, got = grads_of(lambda a, b: a.scatter_reduce(1, INDEX, b, reduce, include_self=include_self),
                         lambda a, b: a.scatter_reduce(1, md(INDEX), b, reduce, include_self=include_self), x, src)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-12)


@pytest.mark.parametrize("include_self", [True, False])
def test_prod_gradient_with_one_and_two_zero_factors(include_self):
    """One zero factor: the product of the others; two: zero; a zero in x: the product of src."""
    x = torch.tensor([[0.0, 2.0], [3.0, 0.0]], dtype=torch.float64)
    src = torch.tensor([[0.0, 4.0, 5.0], [0.0, 0.0, 7.0]], dtype=torch.float64)
    want, got = grads_of(lambda a, b: a.scatter_reduce(1, INDEX, b, "prod", include_self=include_self),
                         lambda a, b: a.scatter_reduce(1, md(INDEX), b, "prod", include_self=include_self), x, src)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-12)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.bool])
def test_extremes_of_many_repeats_as_torch(reduce, dtype):
    """Each place's extreme among many repeated places (sorted by place and value on the device)."""
    generator = torch.Generator().manual_seed(7)
    for include_self in (True, False):
        x = (torch.randn(4, 6, generator=generator) * 4).to(dtype)
        src = (torch.randn(4, 9, generator=generator) * 4).to(dtype)
        index = torch.randint(0, 6, (4, 9), generator=generator)
        want = x.scatter_reduce(1, index, src, reduce, include_self=include_self)
        got = md(x).scatter_reduce(1, md(index), md(src), reduce, include_self=include_self)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_extremes_propagate_nan_and_mean_of_integers_floors(reduce):
    x = torch.tensor([1.0, 2.0, float("nan"), -float("inf")])
    src = torch.tensor([float("nan"), 5.0, 1.0, -7.0, -float("inf")])
    index = torch.tensor([0, 0, 2, 1, 1])
    got = md(x).scatter_reduce(0, md(index), md(src), reduce)
    np.testing.assert_array_equal(got.numpy(), x.scatter_reduce(0, index, src, reduce).numpy())
    xi, si, index = torch.tensor([-5, 7, 9]), torch.tensor([-2, -4, 6]), torch.tensor([0, 0, 2])
    got = md(xi).scatter_reduce(0, md(index), md(si), "mean")
    np.testing.assert_array_equal(got.numpy(), xi.scatter_reduce(0, index, si, "mean").numpy())


def test_as_strided_scatter_input_gradient_is_the_rest_of_the_input():
    """Closed form: the output does not depend on the overwritten places of x (torch's gradient there is the
    incoming one: allow-listed in tests/op_corpus_allow.py)."""
    x = minidl.randn(3, 3, dtype=minidl.float64).requires_grad_(True)
    src = minidl.randn(2, 2, dtype=minidl.float64).requires_grad_(True)
    g = minidl.arange(1.0, 10.0, dtype=minidl.float64).reshape(3, 3)
    gx, gs = minidl.autograd.grad(x.as_strided_scatter(src, (2, 2), (1, 2), 1), (x, src), g)
    overwritten = np.zeros(9, bool)
    overwritten[[1, 3, 2, 4]] = True
    np.testing.assert_array_equal(gx.numpy().reshape(-1), np.where(overwritten, 0.0, g.numpy().reshape(-1)))
    np.testing.assert_array_equal(gs.numpy(), [[2.0, 4.0], [3.0, 5.0]])


@pytest.mark.parametrize("view, size, stride, offset", [
    (lambda x: x.t(), (2, 2), (1, 2), None),            # the region read through x's transposed layout
    (lambda x: x[:, 1:], (2, 2), (1, 2), None),         # x's own storage offset, and storage x does not view
    (lambda x: x[1:], (2, 3), (4, 1), 0),               # storage before x: written, then dropped
    (lambda x: x.t()[1:], (3,), (4,), 2)])
def test_as_strided_scatter_on_views_addresses_the_storage_as_torch(view, size, stride, offset):
    """torch reads the region through x's own layout, so x.as_strided_scatter(x.as_strided(...), ...) is x."""
    base = torch.arange(12.0).reshape(3, 4)
    x, ours = view(base), view(md(base))
    src = -1.0 - torch.arange(float(np.prod(size))).reshape(size)
    want = torch.as_strided_scatter(x, src, size, stride, offset)
    np.testing.assert_array_equal(minidl.as_strided_scatter(ours, md(src), size, stride, offset).numpy(),
                                  want.numpy())
    back = ours.as_strided_scatter(ours.as_strided(size, stride, offset), size, stride, offset)
    np.testing.assert_array_equal(back.numpy(), x.numpy())


def test_as_strided_scatter_gradients_on_a_transposed_view():
    """Closed form through the storage: x's places under the region get nothing, src gets g where x views it."""
    x = minidl.randn(3, 4, dtype=minidl.float64).requires_grad_(True)
    src = minidl.randn(2, 2, dtype=minidl.float64).requires_grad_(True)
    g = np.arange(1.0, 13.0).reshape(4, 3)
    gx, gs = minidl.autograd.grad(x.t().as_strided_scatter(src, (2, 2), (1, 2)), (x, src), minidl.tensor(g))
    storage = g.T.ravel()                               # g laid out as x.t() lays x out: x's storage order
    np.testing.assert_array_equal(gs.numpy(), storage[[[0, 2], [1, 3]]])
    np.testing.assert_array_equal(gx.numpy().ravel(), np.where(np.arange(12) < 4, 0.0, storage))


@pytest.mark.parametrize("dest, source", [("int64", "float32"), ("float32", "int64"), ("float32", "float64")])
def test_index_put_in_place_refuses_another_dtype_as_torch(dest, source):
    """index_put_ casts nothing (unlike x[i] = v): torch refuses values of another dtype, so must we."""
    x, values = torch.zeros(3, dtype=getattr(torch, dest)), torch.ones(1, dtype=getattr(torch, source))
    with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
        x.index_put_((torch.tensor([0]),), values)
    ours = minidl.zeros(3, dtype=getattr(minidl, dest))
    with pytest.raises(RuntimeError, match=r"index_put_\(\): Index put requires the source and destination dtypes "
                                           r"match, got minidl\." + dest):
        ours.index_put_((minidl.tensor([0]),), minidl.ones(1, dtype=getattr(minidl, source)))
    np.testing.assert_array_equal(ours.numpy(), np.zeros(3))


def test_as_strided_scatter_refuses_negative_strides_as_torch():
    with pytest.raises(RuntimeError, match="Negative strides are not supported"):
        torch.as_strided_scatter(torch.zeros(3, 4), torch.zeros(2, 2), (2, 2), (-1, 2), 3)
    with pytest.raises(RuntimeError, match=r"as_strided_scatter: Negative strides are not supported .*\[-1, 2\]"):
        minidl.as_strided_scatter(minidl.zeros(3, 4), minidl.zeros(2, 2), (2, 2), (-1, 2), 3)


@pytest.mark.filterwarnings(r"ignore:index_reduce\(\) is in beta")
def test_in_place_twins_write_as_torch():
    x, src = torch.randn(3, 4), torch.randn(3, 2)
    index = torch.tensor([[0, 3], [1, 1], [2, 0]])
    got = md(x)
    assert got.scatter_reduce_(1, md(index), md(src), "amin", include_self=False) is got
    np.testing.assert_array_equal(got.numpy(), x.clone().scatter_reduce_(1, index, src, "amin",
                                                                        include_self=False).numpy())
    got, source = md(x), torch.randn(3, 2)
    got.index_reduce_(1, minidl.tensor([2, 2]), md(source), "prod")
    np.testing.assert_allclose(got.numpy(), x.clone().index_reduce_(1, torch.tensor([2, 2]), source, "prod").numpy())


@pytest.mark.parametrize("call, message", [
    (lambda x, i: x.scatter_reduce(0, i, x, "max"), "scatter_reduce(): reduce argument must be one of sum"),
    (lambda x, i: x.scatter_reduce(0, i, x.long(), "sum"), "float32 and minidl.int64"),
    (lambda x, i: x.index_reduce(0, i[:, 0], x, "sum"), "index_reduce(): reduce argument must be one of prod"),
    (lambda x, i: minidl.take_along_dim(x, i[0], 1), "input and indices should have the same number of dimensions"),
    (lambda x, i: minidl.take_along_dim(x, i.int(), 1), "dtype of indices should be Long"),
    (lambda x, i: x.select_scatter(minidl.zeros(4), 0, 0), "src size = [4], slice size = [3]"),
    (lambda x, i: x.slice_scatter(x[:, :1], 1, 0, 2, -1), "slice step must be positive"),
    (lambda x, i: x.diag_embed(0, 1, -2), "diagonal dimensions cannot be identical 1, -2"),
    (lambda x, i: x.as_strided_scatter(x, (3, 3), (3, 2)), "reach outside the 9 elements"),
    (lambda x, i: minidl.combinations(x), "Expect a 1D vector, but got shape [3, 3]"),
    (lambda x, i: minidl.fill(x, x[0]), "fill only supports 0-dimension value tensor"),
    (lambda x, i: minidl.diff(x, -1), "order must be non-negative but got -1"),
    (lambda x, i: minidl.cartesian_prod(x), "cartesian_prod expects 1D tensors"),
    (lambda x, i: minidl.block_diag(x[None]), "Input 0 has 3 dimensions"),
    (lambda x, i: minidl.index_put(x, (i[0],), x[0].double()), "Index put requires the source and destination dtypes"),
    (lambda x, i: minidl.einsum(x, [0, 52]), "not within the valid range [0, 52), got 52"),
])
def test_bad_input_is_a_clear_error(call, message):
    x, index = minidl.zeros(3, 3), minidl.tensor([[0, 1], [2, 0]])
    with pytest.raises((RuntimeError, TypeError, ValueError)) as info:
        call(x, index)
    assert message in str(info.value), str(info.value)


def test_unravel_index_wraps_as_torch_and_refuses_floats():
    indices = torch.tensor([[-1, 5], [7, -13]], dtype=torch.int32)
    for want, got in zip(torch.unravel_index(indices, (2, 3, 2)), minidl.unravel_index(md(indices), (2, 3, 2))):
        assert got.dtype is minidl.int64
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(TypeError, match="expected 'indices' to be integer dtype"):
        minidl.unravel_index(minidl.zeros(2), (2,))
    with pytest.raises(RuntimeError, match=r"'shape' \(2, 0\) holds no elements"):
        minidl.unravel_index(minidl.tensor([1]), (2, 0))


@pytest.mark.parametrize("args, dtype", [((1, -3, 4, 3.0), torch.int64), ((4.3, 0, 4, 5.0), torch.int16),
                                         ((0.5, 2.5, 5, 2.0), torch.int32), ((-1, 1, 5, 2.0), torch.float32),
                                         ((2, 0, 1), torch.float64)])
def test_logspace_as_torch(args, dtype):
    got = minidl.logspace(*args, dtype=getattr(minidl, str(dtype).split(".")[1]))
    np.testing.assert_allclose(got.numpy(), torch.logspace(*args, dtype=dtype).numpy(), rtol=1e-6)


@pytest.mark.parametrize("row, col, offset", [(3, 4, 1), (4, 3, -2), (0, 3, 0), (3, 3, 5), (2, 5, -9)])
def test_triangle_indices_as_torch(row, col, offset):
    for name in ("triu_indices", "tril_indices"):
        want = getattr(torch, name)(row, col, offset, dtype=torch.int32)
        got = getattr(minidl, name)(row, col, offset, dtype=minidl.int32)
        assert got.dtype is minidl.int32 and tuple(got.shape) == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_scalar_tensor_takes_the_default_dtype_and_einsum_the_sublist_form():
    assert minidl.scalar_tensor(3).dtype is minidl.float32 and minidl.scalar_tensor(True).item() == 1.0
    a, b = torch.randn(2, 3, 4), torch.randn(4, 5)
    want = torch.einsum(a, [Ellipsis, 30, 1], b, [1, 0], [0, Ellipsis, 30])
    got = minidl.einsum(md(a), [Ellipsis, 30, 1], md(b), [1, 0], [0, Ellipsis, 30])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def onnx_outputs(fn, *inputs):
    program = minidl.onnx.export(fn, tuple(inputs), output_names=["out0"])
    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)})


def test_onnx_unravel_index_and_index_put_wrap_negative_indices():
    indices = minidl.tensor([[-1, 5], [7, -13]])
    got = onnx_outputs(lambda i: sum(minidl.unravel_index(i, (2, 3, 2))), indices)[0]
    np.testing.assert_array_equal(got, sum(minidl.unravel_index(indices, (2, 3, 2))).numpy())
    x, rows = minidl.randn(3, 4), minidl.tensor([-1, 0, -1])
    got = onnx_outputs(lambda x, r: minidl.index_put(x, (r,), x[0] * 2, accumulate=True), x, rows)[0]
    np.testing.assert_allclose(got, minidl.index_put(x, (rows,), x[0] * 2, accumulate=True).numpy(), rtol=1e-6)


def test_onnx_refuses_the_mean_of_integers_by_name():
    x, index = minidl.tensor([[5, 7]]), minidl.tensor([[0, 0]])
    with pytest.raises(minidl.onnx.OnnxExporterError, match="reduce='mean'.*of integers"):
        minidl.onnx.export(lambda x: x.scatter_reduce(1, index, x, "mean"), (x,), output_names=["out0"])


def test_onnx_diff_and_reducing_scatters_keep_dynamic_sizes():
    """Exported with a dynamic first dim, then run at another size: the graphs take their sizes from the inputs."""
    def model(x, index, src):
        return x.diff(2, 1) + minidl.take_along_dim(x, index, 1)[:, :3] + x.scatter_reduce(1, index, src, "mean",
                                                                                           include_self=False)[:, :3]
    buffer = io.BytesIO()
    args = (minidl.randn(2, 5), minidl.tensor([[0, 4, 0], [1, 1, 3]]), minidl.randn(2, 3))
    minidl.onnx.export(model, args, buffer, input_names=["x", "index", "src"], output_names=["out"],
                       dynamic_axes={"x": {0: "n"}, "index": {0: "n"}, "src": {0: "n"}, "out": {0: "n"}})
    session = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    x, index, src = minidl.randn(4, 5), minidl.tensor([[2, 2, 0], [4, 1, 4], [0, 1, 2], [3, 3, 3]]), minidl.randn(4, 3)
    got = session.run(None, {"x": x.numpy(), "index": index.numpy(), "src": src.numpy()})[0]
    np.testing.assert_allclose(got, model(x, index, src).numpy(), rtol=1e-5, atol=1e-6)
