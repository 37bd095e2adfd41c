"""Instance and local response norm, embedding_bag, the similarities and distances and the bilinear form, against
PyTorch where op_db's samples do not look: eps where it bites, zero distances, running statistics, unbatched
inputs, empty and padded bags, sparse and frozen tables, the modules (constructors, repr, state_dict, init), the
ONNX graphs at sizes other than the traced ones, and the errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from cuda_support import cuda  # noqa: F401

torch = pytest.importorskip("torch")
TF = torch.nn.functional
rng = np.random.default_rng(45)


def pair(values, requires_grad=True, dtype=np.float64):
    """The same values as a minidl and a torch leaf."""
    values = np.asarray(values, dtype=dtype)
    return (minidl.tensor(values).requires_grad_(requires_grad),
            torch.tensor(values).requires_grad_(requires_grad))


def check(ours, theirs, rtol=1e-10, atol=1e-12):
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=rtol, atol=atol)


def grads_match(our_out, their_out, our_leaves, their_leaves):
    """The backward of one random cotangent agrees, leaf by leaf."""
    g = rng.standard_normal(tuple(their_out.shape))
    our_out.backward(minidl.tensor(g))
    their_out.backward(torch.tensor(g))
    for a, b in zip(our_leaves, their_leaves):
        check(a.grad, b.grad)


# ----------------------------------------------------------------------------- similarities and distances
def test_cosine_similarity_clamps_each_norm_and_differentiates_the_unclamped_one():
    """torch clamps |x1| and |x2| to eps in place without autograd: the values use the clamped norms, the
    gradients the norms' own derivative (not the derivative of the clamped function)."""
    a, ta = pair(rng.standard_normal((4, 5)) * 0.05)
    b, tb = pair(rng.standard_normal((4, 5)))
    out, tout = F.cosine_similarity(a, b, eps=0.3), TF.cosine_similarity(ta, tb, eps=0.3)
    check(out, tout)
    grads_match(out, tout, (a, b), (ta, tb))


def test_cosine_similarity_of_a_zero_vector_is_zero_with_a_finite_gradient():
    a, ta = pair(np.zeros((2, 3)))
    b, tb = pair(rng.standard_normal((2, 3)))
    out, tout = F.cosine_similarity(a, b), TF.cosine_similarity(ta, tb)
    check(out, tout)
    grads_match(out, tout, (a, b), (ta, tb))


def test_pdist_of_equal_rows_is_zero_with_torch_gradients():
    values = rng.standard_normal((4, 3))
    values[2] = values[0]
    for p in (1.0, 2.0, 3.0, float("inf")):
        x, tx = pair(values)
        out, tout = F.pdist(x, p), TF.pdist(tx, p)
        check(out, tout)
        grads_match(out, tout, (x,), (tx,))


def test_pairwise_distance_broadcasts_and_takes_integers():
    a, ta = pair(rng.standard_normal((3, 4)))
    b, tb = pair(rng.standard_normal(4))
    out, tout = F.pairwise_distance(a, b, 1.5, keepdim=True), TF.pairwise_distance(ta, tb, 1.5, keepdim=True)
    check(out, tout)
    grads_match(out, tout, (a, b), (ta, tb))
    ints = rng.integers(-5, 5, (2, 3))
    out = F.pairwise_distance(minidl.tensor(ints), minidl.tensor(ints[::-1].copy()))
    tout = TF.pairwise_distance(torch.tensor(ints), torch.tensor(ints[::-1].copy()))
    assert out.dtype.name == str(tout.dtype).removeprefix("torch.")
    check(out, tout, rtol=1e-6)


@pytest.mark.parametrize("call, message", [
    (lambda: F.pdist(minidl.randn(2, 3, 4)), r"pdist only supports 2D tensors, got: 3D \(shape \[2, 3, 4\]\)"),
    (lambda: F.pdist(minidl.randn(3, 2), -1.0), "pdist only supports non-negative p values"),
    (lambda: F.pdist(minidl.ones(3, 2, dtype=minidl.int64)), "pdist: expected floating point inputs, got int64"),
    (lambda: F.bilinear(minidl.randn(2, 3), minidl.randn(2, 4), minidl.randn(5, 3, 3)),
     r"bilinear: .*got \[2, 3\], \[2, 4\] and \[5, 3, 3\]"),
    (lambda: F.bilinear(minidl.randn(2, 3), minidl.randn(2, 4), minidl.randn(5, 3, 4), minidl.randn(4)),
     r"bilinear: expected bias of shape \[5\], got \[4\]"),
    (lambda: F.bilinear(minidl.randn(2, 3), minidl.randn(2, 4), minidl.randn(5, 3, 4), minidl.randn(5).double()),
     "bilinear: All tensors must have the same dtype, got input1: float32, input2: float32, weight: float32, "
     "bias: float64"),
])
def test_errors_name_the_op_and_the_shapes(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_bilinear_module_as_torch():
    minidl.manual_seed(0)
    ours, theirs = nn.Bilinear(3, 4, 5), torch.nn.Bilinear(3, 4, 5)
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    bound = 1 / np.sqrt(3)
    for p in (ours.weight, ours.bias):
        assert p.shape == (5, 3, 4)[:p.ndim] and float(p.abs().max()) <= bound
    assert nn.Bilinear(3, 4, 5, bias=False).bias is None
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(ours.weight.detach().numpy()))
        theirs.bias.copy_(torch.tensor(ours.bias.detach().numpy()))
    a, ta = pair(rng.standard_normal((2, 3)), dtype=np.float32)
    b, tb = pair(rng.standard_normal((2, 4)), dtype=np.float32)
    check(ours(a, b), theirs(ta, tb), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="in1_features must be > 0"):
        nn.Bilinear(0, 4, 5)


def test_distance_modules_as_torch():
    for ours, theirs in ((nn.CosineSimilarity(0, 0.5), torch.nn.CosineSimilarity(0, 0.5)),
                         (nn.PairwiseDistance(3.0, 0.1, True), torch.nn.PairwiseDistance(3.0, 0.1, True))):
        assert repr(ours) == repr(theirs)
        a, ta = pair(rng.standard_normal((3, 2)), False)
        b, tb = pair(rng.standard_normal((3, 2)), False)
        check(ours(a, b), theirs(ta, tb))
    assert nn.PairwiseDistance(4.0).norm == torch.nn.PairwiseDistance(4.0).norm


# ----------------------------------------------------------------------------- instance and local response norm
def test_instance_norm_updates_the_running_statistics_as_torch():
    x, tx = pair(rng.standard_normal((3, 2, 5)))
    mean, var = rng.standard_normal(2), rng.uniform(0.5, 2, 2)
    rm, trm = pair(mean, False)
    rv, trv = pair(var, False)
    w, tw = pair(rng.standard_normal(2))
    out = F.instance_norm(x, rm, rv, w, momentum=0.25, eps=1e-3)
    tout = TF.instance_norm(tx, trm, trv, tw, momentum=0.25, eps=1e-3)
    check(out, tout)
    check(rm, trm)
    check(rv, trv)
    grads_match(out, tout, (x, w), (tx, tw))
    out = F.instance_norm(x, rm, rv, use_input_stats=False)
    check(out, TF.instance_norm(tx, trm, trv, use_input_stats=False))


def test_instance_norm_errors():
    with pytest.raises(ValueError, match=r"Expected more than 1 spatial element when training, got input size "
                                         r"\[2, 3, 1\]"):
        F.instance_norm(minidl.randn(2, 3, 1))
    with pytest.raises(RuntimeError, match="running_mean and running_var to be defined"):
        F.instance_norm(minidl.randn(2, 3, 4), use_input_stats=False)
    with pytest.raises(RuntimeError, match="weight should contain 3 elements not 2"):
        F.instance_norm(minidl.randn(2, 3, 4), weight=minidl.ones(2))


@pytest.mark.parametrize("cls, shape", [("InstanceNorm1d", (3, 6)), ("InstanceNorm2d", (2, 3, 4, 2)),
                                        ("InstanceNorm3d", (3, 2, 2, 2))])
def test_instance_norm_modules_track_statistics_batched_and_unbatched(cls, shape):
    ours, theirs = getattr(nn, cls)(3, momentum=0.3, track_running_stats=True), getattr(torch.nn, cls)(
        3, momentum=0.3, track_running_stats=True)
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    x, tx = pair(rng.standard_normal(shape), False, np.float32)
    check(ours(x), theirs(tx), rtol=1e-5, atol=1e-6)
    for name in ("running_mean", "running_var", "num_batches_tracked"):   # (atol: float32 sums of unit-scale
        check(getattr(ours, name), getattr(theirs, name), rtol=1e-6, atol=1e-7)   # values, in another order)
    ours.eval(), theirs.eval()
    check(ours(x), theirs(tx), rtol=1e-5, atol=1e-6)


def test_instance_norm_module_checks_the_channel_count():
    affine = nn.InstanceNorm1d(4, affine=True, bias=False)
    assert affine.bias is None and repr(affine) == repr(torch.nn.InstanceNorm1d(4, affine=True, bias=False))
    with pytest.raises(ValueError, match=r"expected input's size at dim=1 to match num_features \(4\), but got: 3"):
        affine(minidl.randn(2, 3, 5))
    with pytest.warns(UserWarning, match="input's size at dim=0 does not match num_features"):
        nn.InstanceNorm1d(4)(minidl.randn(3, 5))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.InstanceNorm1d(3)(minidl.randn(1, 3, 2, 2))


def test_local_response_norm_module_on_5d_input_with_an_even_size():
    ours, theirs = nn.LocalResponseNorm(4, alpha=0.2, beta=0.6, k=1.5), torch.nn.LocalResponseNorm(4, 0.2, 0.6, 1.5)
    assert repr(ours) == repr(theirs)
    x, tx = pair(rng.standard_normal((2, 6, 2, 3, 2)))
    out, tout = ours(x), theirs(tx)
    check(out, tout)
    grads_match(out, tout, (x,), (tx,))
    with pytest.raises(ValueError, match=r"expected 3D or higher dimensionality input \(got 2 dimensions, shape"):
        F.local_response_norm(minidl.randn(2, 3), 2)


# ----------------------------------------------------------------------------- embedding_bag
BAG_CASES = {  # name -> (indices, kwargs)
    "mean-empty-bags-padding": ([4, 1, 1, 0, 3, 4], dict(offsets=[0, 0, 3, 6], padding_idx=4)),
    "max-negative-values": ([2, 0, 2, 1], dict(offsets=[0, 2, 2], mode="max")),
    # (the last offset is the input's length, as the CSR form asks: torch's float32 and float64 kernels differ
    # on indices after it; minidl leaves them out of every bag)
    "sum-weighted-last-offset": ([1, 3, 0, 2, 2], dict(offsets=[0, 1, 1, 5], mode="sum", include_last_offset=True,
                                                      per_sample_weights=True)),
    "mean-2d-all-padding-row": ([[3, 3], [0, 2]], dict(padding_idx=-2)),
    # (torch 2.13's CPU kernel divides an index that sorts after a repeated one by the wrong count, pytorch#190063:
    # here the once-seen index sorts first; the mixed case is checked in closed form below)
    "sum-scale-grad-by-freq": ([2, 2, 1, 2], dict(offsets=[0, 3], mode="sum", scale_grad_by_freq=True)),
}


def _bag_call(module, indices, kwargs, weight):
    kwargs = dict(kwargs)
    ints = module.tensor(np.asarray(indices, np.int64))
    if "offsets" in kwargs:
        kwargs["offsets"] = module.tensor(np.asarray(kwargs["offsets"], np.int64))
    if kwargs.get("per_sample_weights"):
        kwargs["per_sample_weights"] = weight[1]
    return (minidl.nn.functional if module is minidl else TF).embedding_bag(ints, weight[0], **kwargs)


@pytest.mark.parametrize("name", list(BAG_CASES))
def test_embedding_bag_values_and_gradients_as_torch(name):
    indices, kwargs = BAG_CASES[name]
    w, tw = pair(-np.abs(rng.standard_normal((5, 3))) if "negative" in name else rng.standard_normal((5, 3)))
    p, tp = pair(rng.standard_normal(np.shape(indices)))
    out, tout = _bag_call(minidl, indices, kwargs, (w, p)), _bag_call(torch, indices, kwargs, (tw, tp))
    check(out, tout)
    leaves = ((w, p), (tw, tp)) if kwargs.get("per_sample_weights") else ((w,), (tw,))
    grads_match(out, tout, *leaves)


def test_embedding_bag_scales_each_row_gradient_by_its_own_frequency():
    """Each row's gradient divided by how often its index occurs in the whole input (torch's documented rule; its CPU
    kernel gives row 3 here 0.5, pytorch#190063)."""
    w = minidl.ones(4, 1, requires_grad=True)
    out = F.embedding_bag(minidl.tensor([1, 1, 3]), w, minidl.tensor([0]), mode="sum", scale_grad_by_freq=True)
    out.sum().backward()
    assert w.grad.flatten().tolist() == [0.0, 1.0, 0.0, 1.0]


def test_embedding_bag_sparse_gradient_and_max_norm_as_torch():
    values = rng.standard_normal((6, 3)) * 3
    w, tw = pair(values)
    out = F.embedding_bag(minidl.tensor([0, 2, 2, 5]), w, minidl.tensor([0, 1]), mode="sum", sparse=True)
    out.sum().backward()
    TF.embedding_bag(torch.tensor([0, 2, 2, 5]), tw, torch.tensor([0, 1]), mode="sum", sparse=True).sum().backward()
    assert w.grad.is_sparse and tw.grad.is_sparse
    check(w.grad.to_dense(), tw.grad.to_dense())
    w, tw = pair(values, False)
    out = F.embedding_bag(minidl.tensor([[0, 2], [2, 5]]), w, max_norm=1.0)
    tout = TF.embedding_bag(torch.tensor([[0, 2], [2, 5]]), tw, max_norm=1.0)
    check(out, tout, rtol=1e-7)
    check(w, tw, rtol=1e-7)   # (the looked-up rows renormalised in place)


@pytest.mark.parametrize("call, error, message", [
    (lambda w: F.embedding_bag(minidl.tensor([0, 1]), w, minidl.tensor([0]), mode="mean",
                               per_sample_weights=minidl.ones(2)), NotImplementedError,
     "per_sample_weights is only supported for mode='sum' \\(got mode='mean'\\)"),
    (lambda w: F.embedding_bag(minidl.tensor([[0, 1]]), w, minidl.tensor([0])), ValueError,
     "if input is 2D, then offsets has to be None"),
    (lambda w: F.embedding_bag(minidl.tensor([0, 1]), w), ValueError, "offsets has to be a 1D Tensor but got None"),
    (lambda w: F.embedding_bag(minidl.zeros(1, 1, 2, dtype=minidl.int64), w), ValueError,
     "input has to be 1D or 2D Tensor, but got Tensor of dimension 3"),
    (lambda w: F.embedding_bag(minidl.tensor([0, 1]), w, minidl.tensor([1])), ValueError,
     "offsets must start at 0 .* got offsets from 1 to 1"),
    (lambda w: F.embedding_bag(minidl.tensor([0, 1]), w, minidl.tensor([0]), mode="min"), ValueError,
     "mode has to be one of sum, mean or max, got 'min'"),
    (lambda w: F.embedding_bag(minidl.tensor([0, 1]), w, minidl.tensor([0]), mode="max", sparse=True), ValueError,
     "max mode does not support sparse weights"),
    (lambda w: F.embedding_bag(minidl.tensor([0, 7]), w, minidl.tensor([0])), IndexError, "index out of range"),
    (lambda w: F.embedding_bag(minidl.tensor([0.0]), w, minidl.tensor([0])), RuntimeError,
     "expected the indices and offsets to be int64 or int32, got float32"),
    (lambda w: F.embedding_bag(minidl.tensor([0, 1]), w, minidl.tensor([0.0])), RuntimeError,
     "expected the indices and offsets to be int64 or int32, got int64 and float32"),
    (lambda w: F.embedding_bag(minidl.tensor([0, 1]), w.long(), minidl.tensor([0])), RuntimeError,
     "expected a floating point weight, got int64"),
    (lambda w: F.embedding_bag(minidl.tensor([0, 1]), w, minidl.tensor([0]), mode="sum",
                               per_sample_weights=minidl.ones(2, dtype=minidl.float64)), RuntimeError,
     r"per_sample_weights \(float64\) must have the weight's dtype \(float32\)"),
])
def test_embedding_bag_errors(call, error, message):
    with pytest.raises(error, match=message):
        call(minidl.randn(4, 2))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_padding_makes_the_host_wait_no_more_than_the_lookup(cuda, monkeypatch, mode):
    """Padding indices fold into a bag that is dropped, not out through a mask: on 'cuda' the bags read back to
    the host only what the lookup's own index check reads (a mask's size would be one more read), and offsets
    one flag more (not each bound)."""
    from minidl.kernels.cuda import runtime
    reads = []

    def count(what, *args):
        if "to the host" in what or "nonzero" in what:
            reads.append(what)
    monkeypatch.setattr(runtime, "refuse_during_capture", count)
    indices, table = [[3, 1, 3], [0, 3, 2]], rng.standard_normal((4, 2))
    w = minidl.tensor(table, device="cuda")
    F.embedding(minidl.tensor(indices, device="cuda"), w)
    lookup, reads[:] = list(reads), []
    out = F.embedding_bag(minidl.tensor(indices, device="cuda"), w, mode=mode, padding_idx=3)
    assert reads == lookup
    check(out.cpu(), TF.embedding_bag(torch.tensor(indices), torch.tensor(table), mode=mode, padding_idx=3))
    reads[:] = []   # (offsets: one more read, of whether they are in bounds)
    flat, offsets = minidl.tensor(indices, device="cuda").flatten(), minidl.tensor([0, 2, 6], device="cuda")
    out = F.embedding_bag(flat, w, offsets, mode=mode, padding_idx=3, include_last_offset=True)
    assert len(reads) == len(lookup) + 1
    check(out.cpu(), TF.embedding_bag(torch.tensor(indices).flatten(), torch.tensor(table), torch.tensor([0, 2, 6]),
                                      mode=mode, padding_idx=3, include_last_offset=True))


def test_embedding_bag_module_as_torch():
    minidl.manual_seed(0)
    ours = nn.EmbeddingBag(6, 3, mode="max", padding_idx=-1)
    theirs = torch.nn.EmbeddingBag(6, 3, mode="max", padding_idx=-1)
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    assert float(ours.weight[5].abs().sum()) == 0.0
    table = minidl.randn(4, 2)
    frozen = nn.EmbeddingBag.from_pretrained(table, mode="sum")
    assert not frozen.weight.requires_grad and nn.EmbeddingBag.from_pretrained(table, freeze=False).weight.requires_grad
    got = frozen(minidl.tensor([3, 0, 1]), minidl.tensor([0, 2]), per_sample_weights=minidl.tensor([1.0, 2.0, 3.0]))
    want = TF.embedding_bag(torch.tensor([3, 0, 1]), torch.tensor(table.numpy()), torch.tensor([0, 2]), mode="sum",
                            per_sample_weights=torch.tensor([1.0, 2.0, 3.0]))
    check(got, want, rtol=1e-6)


# ----------------------------------------------------------------------------- ONNX at other sizes
def _onnx_run(fn, traced, other, axes):
    onnxruntime = pytest.importorskip("onnxruntime")
    import io
    buffer, names = io.BytesIO(), [f"in{i}" for i in range(len(traced))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        minidl.onnx.export(fn, tuple(traced), buffer, input_names=names, output_names=["out"],
                           dynamic_axes={**{n: axes[i] for i, n in enumerate(names)}, "out": {0: "n"}})
    session = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    return session.run(None, {n: t.numpy() for n, t in zip(names, other)})[0]


def test_embedding_bag_onnx_follows_other_bag_counts():
    """The bags come from the offsets in the graph: another input with other bags (an empty one, indices after
    the last offset) runs as minidl does."""
    table = minidl.randn(6, 3)
    for mode in ("sum", "mean", "max"):
        def fn(ints, offsets, mode=mode):
            return F.embedding_bag(ints, table, offsets, mode=mode, include_last_offset=True, padding_idx=2)
        traced = (minidl.tensor([0, 1, 2, 3]), minidl.tensor([0, 2, 4]))
        other = (minidl.tensor([5, 2, 1, 3, 0, 4, 4]), minidl.tensor([0, 3, 3, 5]))
        got = _onnx_run(fn, traced, other, [{0: "i"}, {0: "b"}])
        np.testing.assert_allclose(got, fn(*other).numpy(), rtol=1e-6, atol=1e-6)


def test_embedding_bag_onnx_of_2d_input_follows_other_bag_lengths():
    table = rng.standard_normal((6, 3)).astype(np.float32)
    for mode in ("sum", "mean", "max"):
        def fn(ints, mode=mode):
            return F.embedding_bag(ints, minidl.tensor(table), mode=mode, padding_idx=2)
        other = np.array([[5, 2, 1, 3, 0], [4, 4, 2, 2, 1]])
        got = _onnx_run(fn, (minidl.tensor([[0, 1, 2], [3, 2, 5]]),), (minidl.tensor(other),), [{0: "n", 1: "length"}])
        want = TF.embedding_bag(torch.tensor(other), torch.tensor(table), mode=mode, padding_idx=2)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)


def test_instance_norm_and_lrn_onnx_follow_other_sizes():
    model = nn.Sequential(nn.InstanceNorm2d(3, affine=True), nn.LocalResponseNorm(2, alpha=0.5),
                          nn.LocalResponseNorm(3, alpha=0.5))
    nn.init.normal_(model[0].weight)
    other = minidl.randn(1, 3, 6, 3)
    got = _onnx_run(model, (minidl.randn(2, 3, 4, 5),), (other,), [{0: "n", 2: "h", 3: "w"}])
    with minidl.no_grad():
        np.testing.assert_allclose(got, model(other).numpy(), rtol=1e-5, atol=1e-5)


def test_pdist_onnx_warns_that_its_pairs_are_fixed():
    """pdist's pairs are the traced row count's: an export with a dynamic row axis is told it is not followed."""
    x = minidl.randn(4, 3)
    with pytest.warns(UserWarning, match="pdist of a traced tensor is lowered with the sizes it had while tracing"):
        minidl.onnx.export(lambda v: F.pdist(v), (x,), input_names=["x"], output_names=["out"],
                           dynamic_axes={"x": {0: "n"}})
