"""The losses of minidl/ops/losses.py and their modules against torch: what the op corpus and the registry
sweeps leave out (modules and their legacy arguments, CTC's edge cases, the Gaussian NLL's clamped variance,
repeated multilabel targets) and the errors bad input gets."""
from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F

torch = pytest.importorskip("torch")


def pair(values, requires_grad=True, dtype=np.float64):
    """The same leaf in minidl and in torch."""
    values = np.asarray(values, dtype=dtype)
    return (minidl.tensor(values).requires_grad_(requires_grad),
            torch.tensor(values).requires_grad_(requires_grad))


def same(ours, theirs, leaves=(), atol=1e-10):
    """Values equal, and the gradients of the leaves (pairs) for a fixed cotangent."""
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-9, atol=atol)
    if not leaves:
        return
    cot = np.random.default_rng(0).standard_normal(tuple(theirs.shape))
    ours.backward(minidl.tensor(cot))
    theirs.backward(torch.tensor(cot))
    for mine, reference in leaves:
        np.testing.assert_allclose(mine.grad.numpy(), reference.grad.numpy(), rtol=1e-9, atol=atol)


rng = np.random.default_rng(45)


# ----------------------------------------------------------------------------- modules
def module_cases():
    x, y, z = (rng.standard_normal((4, 5)) for _ in range(3))
    sign = np.sign(rng.standard_normal(4))
    classes = np.array([1, 0, 4, 2])
    return [
        ("MarginRankingLoss", dict(margin=0.5, reduction="sum"), [x[:, 0], y[:, 0]], [sign]),
        ("TripletMarginLoss", dict(margin=2.0, p=1.0, swap=True), [x, y, z], []),
        ("CosineEmbeddingLoss", dict(margin=0.1, reduction="none"), [x, y], [sign]),
        ("HingeEmbeddingLoss", dict(margin=0.5), [x], [np.sign(y)]),
        ("MultiMarginLoss", dict(p=2, margin=0.7, weight=rng.uniform(0.5, 2, 5)), [x], [classes]),
        ("MultiLabelMarginLoss", dict(size_average=False), [x], [np.array([[1, 3, -1, 0, 0]] * 4)]),
        ("MultiLabelSoftMarginLoss", dict(weight=rng.uniform(0.5, 2, 5), reduce=False), [x], [(y > 0) * 1.0]),
        ("SoftMarginLoss", dict(reduction="none"), [x], [np.sign(y)]),
        ("GaussianNLLLoss", dict(full=True, eps=1e-3), [x, y, rng.uniform(0.5, 2, (4, 1))], []),
        ("PoissonNLLLoss", dict(log_input=False, full=True), [np.abs(x) + 0.1], [np.abs(y) * 3]),
    ]


CASES = module_cases()


@pytest.mark.parametrize("name, kwargs, leaves, constants", CASES, ids=[case[0] for case in CASES])
def test_loss_module_computes_as_torch(name, kwargs, leaves, constants):
    def convert(value, to):
        return to(value) if isinstance(value, np.ndarray) else value
    ours = getattr(nn, name)(**{k: convert(v, minidl.tensor) for k, v in kwargs.items()})
    theirs = getattr(torch.nn, name)(**{k: convert(v, torch.tensor) for k, v in kwargs.items()})
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.reduction == theirs.reduction
    pairs = [pair(v) for v in leaves]
    got = ours(*[m for m, _ in pairs], *[minidl.tensor(c) for c in constants])
    want = theirs(*[t for _, t in pairs], *[torch.tensor(c) for c in constants])
    same(got, want, pairs)


def test_ctc_loss_module_and_triplet_with_a_distance_function():
    lp, lp_t = pair(np.log(rng.dirichlet(np.ones(5), (6, 2))))
    targets = np.array([[1, 2, 3], [4, 4, 0]])
    got = nn.CTCLoss(blank=0, reduction="sum")(lp, minidl.tensor(targets), (6, 5), (3, 2))
    want = torch.nn.CTCLoss(blank=0, reduction="sum")(lp_t, torch.tensor(targets), (6, 5), (3, 2))
    same(got, want, [(lp, lp_t)])
    a, p, n = (pair(rng.standard_normal((3, 4))) for _ in range(3))
    got = nn.TripletMarginWithDistanceLoss(distance_function=lambda u, v: (u - v).abs().amax(-1), swap=True)(
        a[0], p[0], n[0])
    want = torch.nn.TripletMarginWithDistanceLoss(distance_function=lambda u, v: (u - v).abs().amax(-1), swap=True)(
        a[1], p[1], n[1])
    same(got, want, [a, p, n])
    same(nn.TripletMarginWithDistanceLoss()(a[0], p[0], n[0]), torch.nn.TripletMarginWithDistanceLoss()(
        a[1], p[1], n[1]))
    assert repr(nn.TripletMarginWithDistanceLoss()) == repr(torch.nn.TripletMarginWithDistanceLoss())


def test_module_arguments_are_checked_as_torch():
    with pytest.raises(ValueError, match="only p == 1 and p == 2"):
        nn.MultiMarginLoss(p=3)
    with pytest.raises(ValueError, match="expected weight to be None or 1D tensor, got 2D"):
        nn.MultiMarginLoss(weight=minidl.ones(2, 2))
    with pytest.raises(ValueError, match="TripletMarginLoss: expected margin to be greater than 0, got 0"):
        nn.TripletMarginLoss(margin=0)
    with pytest.raises(ValueError, match="TripletMarginWithDistanceLoss: expected margin"):
        nn.TripletMarginWithDistanceLoss(margin=-1.0)


# ----------------------------------------------------------------------------- CTC
def ctc_both(log_probs, targets, input_lengths, target_lengths, **kwargs):
    lp, lp_t = pair(log_probs)
    as_ours = [minidl.tensor(v) if isinstance(v, np.ndarray) else v for v in (targets, input_lengths, target_lengths)]
    as_torch = [torch.tensor(v) if isinstance(v, np.ndarray) else v for v in (targets, input_lengths, target_lengths)]
    return F.ctc_loss(lp, *as_ours, **kwargs), torch.nn.functional.ctc_loss(lp_t, *as_torch, **kwargs), (lp, lp_t)


def log_softmaxed(*shape):
    x = rng.standard_normal(shape)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_concatenated_targets_short_inputs_and_repeats(reduction):
    """Repeated labels need a blank between them; steps past an input's length get no gradient."""
    got, want, leaf = ctc_both(log_softmaxed(7, 3, 5), np.array([2, 2, 1, 3, 3, 3, 4]), np.array([7, 5, 6]),
                               np.array([2, 2, 3]), blank=0, reduction=reduction)
    same(got, want, [leaf])


def test_ctc_padded_targets_with_junk_padding_blank_last_and_an_empty_input_and_target():
    targets = np.array([[1, 0, -7, 99], [2, 2, 0, 1], [0, 5, 5, 5]])   # (padding past the lengths is never read)
    got, want, leaf = ctc_both(log_softmaxed(6, 3, 6), targets, (6, 6, 0), (2, 4, 0), blank=5, reduction="mean")
    same(got, want, [leaf])


def test_ctc_unbatched_and_impossible_alignments():
    """zero_infinity: an alignment that cannot fit (target longer than input) gives 0 and no gradient."""
    got, want, leaf = ctc_both(log_softmaxed(5, 4), np.array([1, 2, 3]), np.array(5), np.array(3), reduction="none")
    same(got, want, [leaf])
    assert got.shape == ()
    got, want, leaf = ctc_both(log_softmaxed(3, 2, 4), np.array([[1, 1, 1], [1, 2, 0]]), (3, 3), (3, 2),
                               reduction="none", zero_infinity=True)
    assert got[0].item() == 0.0 and want[0].item() == 0.0
    same(got, want, [leaf])
    got, _, _ = ctc_both(log_softmaxed(3, 2, 4), np.array([[1, 1, 1], [1, 2, 0]]), (3, 3), (3, 2), reduction="none")
    assert got[0].item() == float("inf")


def test_ctc_errors_name_the_bad_argument():
    lp = minidl.tensor(log_softmaxed(4, 2, 3))
    targets = minidl.tensor(np.array([[1, 2], [1, 1]]))
    with pytest.raises(RuntimeError, match="input_lengths must lie in"):
        F.ctc_loss(lp, targets, (5, 4), (2, 2))
    with pytest.raises(RuntimeError, match="target_lengths must be of size batch_size"):
        F.ctc_loss(lp, targets, (4, 4), (2,))
    with pytest.raises(RuntimeError, match=r"blank must be in label range \[0, 3\)"):
        F.ctc_loss(lp, targets, (4, 4), (2, 2), blank=3)
    with pytest.raises(RuntimeError, match=r"targets of size \(2, at least 3\)"):
        F.ctc_loss(lp, targets, (4, 4), (3, 2))
    with pytest.raises(RuntimeError, match="concatenated targets of size 4"):
        F.ctc_loss(lp, minidl.tensor(np.array([1, 2, 1])), (4, 4), (2, 2))
    with pytest.raises(RuntimeError, match="input_lengths must be integral"):
        F.ctc_loss(lp, targets, minidl.tensor([4.0, 4.0]), (2, 2))
    with pytest.raises(ValueError, match="avg is not a valid value for reduction"):
        F.ctc_loss(lp, targets, (4, 4), (2, 2), reduction="avg")


# ----------------------------------------------------------------------------- the others' edge cases
def test_gaussian_nll_var_clamped_without_touching_its_gradient_and_its_shapes():
    x, x_t = pair(rng.standard_normal((3, 4)))
    var, var_t = pair(np.array([1e-9, 0.5, 2.0]))   # (one variance per row; the first clamped to eps)
    target = rng.standard_normal((3, 4))
    same(F.gaussian_nll_loss(x, minidl.tensor(target), var, eps=1e-4),
         torch.nn.functional.gaussian_nll_loss(x_t, torch.tensor(target), var_t, eps=1e-4), [(x, x_t), (var, var_t)])
    same(F.gaussian_nll_loss(minidl.tensor(target), minidl.tensor(target[::-1].copy()), 0.7, full=True),
         torch.nn.functional.gaussian_nll_loss(torch.tensor(target), torch.tensor(target[::-1].copy()), 0.7,
                                               full=True))
    with pytest.raises(ValueError, match="var is of incorrect size"):
        F.gaussian_nll_loss(x, minidl.tensor(target), minidl.ones(3, 2))
    with pytest.raises(ValueError, match="var has negative entry"):
        F.gaussian_nll_loss(x, minidl.tensor(target), -minidl.ones(3, 4))
    with pytest.raises(ValueError, match="abc is not valid"):
        F.gaussian_nll_loss(x, minidl.tensor(target), minidl.ones(3, 4), reduction="abc")


def test_poisson_full_adds_stirling_only_above_one():
    x, x_t = pair(rng.standard_normal(6))
    target = np.array([0.0, 0.5, 1.0, 1.5, 3.0, 7.0])
    same(F.poisson_nll_loss(x, minidl.tensor(target), full=True, reduction="none"),
         torch.nn.functional.poisson_nll_loss(x_t, torch.tensor(target), full=True, reduction="none"), [(x, x_t)])


def test_multilabel_margin_counts_repeated_labels_and_stops_at_the_first_minus_one():
    x, x_t = pair(rng.standard_normal((3, 5)))
    target = np.array([[2, 2, -1, 4, 0], [0, 1, 2, 3, 4], [-1, 1, 1, 1, 1]])
    same(F.multilabel_margin_loss(x, minidl.tensor(target), reduction="none"),
         torch.nn.functional.multilabel_margin_loss(x_t, torch.tensor(target), reduction="none"), [(x, x_t)])


@pytest.mark.parametrize("call, error, message", [
    (lambda: F.multi_margin_loss(minidl.randn(3, 4), minidl.tensor([0, 1, 4])), RuntimeError, "target out of range"),
    (lambda: F.multi_margin_loss(minidl.randn(3, 4), minidl.tensor([0, 1])), RuntimeError,
     r"inconsistent target size, expected 3 but got \[2\]"),
    (lambda: F.multi_margin_loss(minidl.randn(3, 0), minidl.tensor([0, 1, 2])), RuntimeError,
     r"Expected non-empty vector or matrix with optional 0-dim batch size, but got: \[3, 0\]"),
    (lambda: F.multi_margin_loss(minidl.randn(3, 4), minidl.tensor([0.0, 1, 2])), RuntimeError, "Long.*float32"),
    (lambda: F.multi_margin_loss(minidl.randn(3, 4), minidl.tensor([0, 1, 2]), p=3), ValueError, "only p == 1"),
    (lambda: F.multi_margin_loss(minidl.randn(3, 4), minidl.tensor([0, 1, 2]), weight=minidl.ones(3)),
     RuntimeError, r"inconsistent weight size, expected 4 but got \[3\]"),
    (lambda: F.multilabel_margin_loss(minidl.randn(3, 4), minidl.tensor([0, 1, 2])), RuntimeError,
     r"inconsistent target size: \[3\] for input of size: \[3, 4\]"),
    (lambda: F.multilabel_margin_loss(minidl.randn(2, 3), minidl.tensor([[0, -2, 1], [0, 1, 2]])), RuntimeError,
     "'target' is out of range"),
    (lambda: F.margin_ranking_loss(minidl.randn(3), minidl.randn(3), minidl.randn(3, 1)), RuntimeError,
     r"All input tensors should have same dimension but got sizes: input1: \[3\], input2: \[3\], target: \[3, 1\]"),
    (lambda: F.cosine_embedding_loss(minidl.randn(2, 3), minidl.randn(2, 3), minidl.tensor(1.0)), RuntimeError,
     r"0D target tensor expects 1D input tensors, but found inputs with sizes \[2, 3\] and \[2, 3\]"),
    (lambda: F.triplet_margin_loss(minidl.randn(2, 3), minidl.randn(3), minidl.randn(2, 3)), RuntimeError,
     "anchor 2D, positive 1D, and negative 2D inputs"),
    (lambda: F.triplet_margin_with_distance_loss(minidl.randn(3), minidl.randn(3), minidl.randn(3), margin=0.0),
     ValueError, "margin must be greater than 0, got 0.0"),
    (lambda: F.soft_margin_loss(minidl.randn(3), minidl.randn(3), reduction="avg"), ValueError,
     "avg is not a valid value for reduction"),
])
def test_bad_input_is_refused_clearly(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("legacy", [dict(reduce=False), dict(size_average=False), dict(size_average=True),
                                    dict(size_average=False, reduce=True)])
@pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated")
def test_legacy_size_average_and_reduce(legacy):
    x, y = rng.standard_normal((3, 4)), np.sign(rng.standard_normal((3, 4)))
    for name in ("soft_margin_loss", "hinge_embedding_loss"):
        same(getattr(F, name)(minidl.tensor(x), minidl.tensor(y), **legacy),
             getattr(torch.nn.functional, name)(torch.tensor(x), torch.tensor(y), **legacy))
    assert nn.PoissonNLLLoss(**legacy).reduction == torch.nn.PoissonNLLLoss(**legacy).reduction


def test_ctc_refuses_a_double_backward_rather_than_a_wrong_one():
    lp = minidl.tensor(log_softmaxed(4, 1, 3)).requires_grad_()
    loss = F.ctc_loss(lp, minidl.tensor(np.array([[1, 2]])), (4,), (2,))
    with pytest.raises(NotImplementedError, match="ctc_loss: the derivative of its backward"):
        minidl.autograd.grad(loss, lp, create_graph=True)


def test_the_corpus_passes_a_torch_module_argument_as_minidls_of_that_name():
    """op_db's triplet_margin_with_distance_loss samples pass distance_function=torch.nn.PairwiseDistance()."""
    import op_corpus
    converted = op_corpus.to_minidl(torch.nn.Hardtanh(-0.5, 0.25))
    assert type(converted) is nn.Hardtanh and (converted.min_val, converted.max_val) == (-0.5, 0.25)
    with pytest.raises(op_corpus.NotApplicable, match="torch.nn.Linear argument"):
        op_corpus.to_minidl(torch.nn.Linear(2, 2))   # (parameters: not a setting to copy)

    class Unknown(torch.nn.Module):
        pass
    with pytest.raises(op_corpus.NotApplicable, match="torch.nn.Unknown argument"):
        op_corpus.to_minidl(Unknown())


AUTOCAST_CASES = {   # name -> (inputs as float32 arrays (made bfloat16), extra constant arguments)
    "margin_ranking_loss": ([(3,), (3,)], [np.array([1.0, -1.0, 1.0])]),
    "hinge_embedding_loss": ([(3,)], [np.array([1.0, -1.0, 1.0])]),
    "soft_margin_loss": ([(3,), (3,)], []),
    "multilabel_soft_margin_loss": ([(2, 3), (2, 3)], []),
    "triplet_margin_loss": ([(2, 3), (2, 3), (2, 3)], []),
    "triplet_margin_with_distance_loss": ([(2, 3), (2, 3), (2, 3)], []),
    "cosine_embedding_loss": ([(2, 3), (2, 3)], [np.array([1.0, -1.0])]),
    "multi_margin_loss": ([(2, 3)], [np.array([0, 2])]),
    "multilabel_margin_loss": ([(2, 3)], [np.array([[0, -1, 0], [1, 2, -1]])]),
    "poisson_nll_loss": ([(2, 3), (2, 3)], []),
    "ctc_loss": ([(4, 1, 3)], [np.array([[1, 2]]), np.array([4]), np.array([2])]),
}


@pytest.mark.parametrize("name", sorted(AUTOCAST_CASES))
def test_cpu_autocast_runs_each_loss_in_torchs_dtype(name):
    """torch's CPU autocast is the oracle: its one-op losses run in float32, its compositions in bfloat16."""
    shapes, constants = AUTOCAST_CASES[name]
    values = [rng.uniform(0.1, 1.0, shape).astype(np.float32) for shape in shapes]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = getattr(torch.nn.functional, name)(*[torch.tensor(v).bfloat16() for v in values],
                                                  *[torch.tensor(c) for c in constants])
    with minidl.autocast("cpu", dtype=minidl.bfloat16):
        got = getattr(F, name)(*[minidl.tensor(v).to(minidl.bfloat16) for v in values],
                               *[minidl.tensor(c) for c in constants])
    assert got.dtype.name == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2e-2, atol=2e-2)


def test_ctc_on_cuda_takes_targets_and_lengths_from_the_cpu():
    from cuda_support import cuda_device
    cuda_device()
    values = log_softmaxed(5, 2, 4)
    lp = minidl.tensor(values, device="cuda").requires_grad_()
    lp_t = torch.tensor(values).requires_grad_()
    targets, lengths = np.array([[1, 2, 2], [3, 3, 0]]), np.array([3, 2])
    got = F.ctc_loss(lp, minidl.tensor(targets), minidl.tensor(np.array([5, 4])), minidl.tensor(lengths))
    want = torch.nn.functional.ctc_loss(lp_t, torch.tensor(targets), torch.tensor([5, 4]), torch.tensor(lengths))
    assert got.device.type == "cuda"
    got.backward()
    want.backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-9)
    np.testing.assert_allclose(lp.grad.cpu().numpy(), lp_t.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_refused_gradients_as_torch():
    x, target = minidl.randn(3), minidl.randn(3).requires_grad_()
    with pytest.raises(RuntimeError, match="'soft_margin_loss' is not differentiable with respect to argument"):
        F.soft_margin_loss(x, target)
    with pytest.raises(RuntimeError, match="'multi_margin_loss' is not differentiable with respect to argument"):
        F.multi_margin_loss(minidl.randn(2, 3), minidl.tensor([0, 1]), weight=minidl.ones(3).requires_grad_())
    with minidl.no_grad():
        F.soft_margin_loss(x, target)


def test_triplet_margin_with_p_0_counts_nonzeros():
    a, p, n = (rng.standard_normal((3, 4)) for _ in range(3))
    p[0] = a[0] - 1e-6   # (a zero difference once eps is added)
    same(F.triplet_margin_loss(*map(minidl.tensor, (a, p, n)), p=0, margin=2.0, reduction="none"),
         torch.nn.functional.triplet_margin_loss(*map(torch.tensor, (a, p, n)), p=0, margin=2.0, reduction="none"))


def test_onnx_export_of_ctc_loss_names_the_op_it_cannot_lower():
    """ONNX has no CTC loss: an export needing one is refused with the op's name (the others lower)."""
    from minidl.onnx import OnnxExporterError
    targets = minidl.tensor(np.array([[1, 2]]))
    with pytest.raises(OnnxExporterError, match="op 'ctc_loss'"):
        minidl.onnx.export(lambda lp: F.ctc_loss(lp, targets, (4,), (2,)), (minidl.tensor(log_softmaxed(4, 1, 3)),))
