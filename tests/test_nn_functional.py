"""nn.functional and the layer modules against numpy references and finite differences (float64)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F

RNG = np.random.default_rng(0)


def T(a, requires_grad=False):
    return minidl.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def fd_check(fn, arrays, eps=1e-6, atol=1e-6, rtol=1e-5, seed=1):
    """autograd's gradient of <u, fn(*x)> against central differences, coordinate by coordinate."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    leaves = [T(a, True) for a in arrays]
    out = fn(*leaves)
    u = rng.standard_normal(tuple(out.shape))
    (out * T(u)).sum().backward()

    def value(xs):
        with minidl.no_grad():
            return float((fn(*[T(x) for x in xs]).numpy() * u).sum())

    for i, a in enumerate(arrays):
        num = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus = [x.copy() for x in arrays]
            minus = [x.copy() for x in arrays]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            num[idx] = (value(plus) - value(minus)) / (2 * eps)
        got = leaves[i].grad.numpy() if leaves[i].grad is not None else np.zeros_like(a)
        np.testing.assert_allclose(got, num, atol=atol, rtol=rtol, err_msg=f"input {i}")
    return out


def away_from(a, points=(0.0,), gap=0.05):
    a = np.array(a)
    for p in points:
        near = np.abs(a - p) < gap
        a[near] = p + gap * np.where(a[near] >= p, 1, -1) * 2
    return a


X = away_from(RNG.standard_normal((3, 4)))

ACTIVATIONS = {
    "relu": (F.relu, lambda x: np.maximum(x, 0)),
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x))),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (lambda x: F.elu(x, 1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(x))),
    "softplus": (lambda x: F.softplus(x, beta=2.0, threshold=1.0),
                 lambda x: np.where(2 * x > 1.0, x, np.log1p(np.exp(2 * x)) / 2)),
    "sigmoid": (F.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (F.tanh, np.tanh),
    "logsigmoid": (F.logsigmoid, lambda x: -np.log1p(np.exp(-x))),
    "softmax": (lambda x: F.softmax(x, dim=1), lambda x: np.exp(x) / np.exp(x).sum(1, keepdims=True)),
    "log_softmax": (lambda x: F.log_softmax(x, dim=0),
                    lambda x: x - np.log(np.exp(x).sum(0, keepdims=True))),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_values_and_grads(name):
    fn, ref = ACTIVATIONS[name]
    x = X if name != "softplus" else away_from(X, (0.5,))
    out = fd_check(fn, [x])
    np.testing.assert_allclose(out.detach().numpy(), ref(x), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("module, fn", [
    (nn.ReLU(), F.relu), (nn.GELU(), F.gelu), (nn.GELU("tanh"), lambda x: F.gelu(x, approximate="tanh")),
    (nn.SiLU(), F.silu), (nn.Tanh(), F.tanh), (nn.Sigmoid(), F.sigmoid),
    (nn.LeakyReLU(0.3), lambda x: F.leaky_relu(x, 0.3)), (nn.ELU(0.5), lambda x: F.elu(x, 0.5)),
    (nn.Softplus(3.0, 5.0), lambda x: F.softplus(x, 3.0, 5.0)), (nn.Softmax(-1), lambda x: F.softmax(x, -1)),
    (nn.LogSoftmax(1), lambda x: F.log_softmax(x, 1)), (nn.LogSigmoid(), F.logsigmoid),
])
def test_activation_modules_match_functional(module, fn):
    x = T(X)
    np.testing.assert_array_equal(module(x).numpy(), fn(x).numpy())


def test_activation_extremes_stay_finite():
    x = T([-1e4, -50.0, 0.0, 50.0, 1e4], requires_grad=True)
    for f in (F.elu, F.softplus, F.logsigmoid, F.silu, F.gelu, lambda t: F.leaky_relu(t, 0.1)):
        x.grad = None
        y = f(x)
        y.sum().backward()
        assert np.isfinite(y.detach().numpy()).all() and np.isfinite(x.grad.numpy()).all(), f
    np.testing.assert_allclose(F.logsigmoid(x).detach().numpy(), [-1e4, -50.0, -math.log(2), -1.9287e-22, 0.0],
                               rtol=1e-4)


def test_inplace_activations():
    x = T([-1.0, 2.0])
    assert F.relu(x, inplace=True) is x and x.tolist() == [0.0, 2.0]
    y = T([-1.0, 2.0])
    F.leaky_relu(y, 0.5, inplace=True)
    assert y.tolist() == [-0.5, 2.0]


def test_linear():
    x, w, b = RNG.standard_normal((5, 3)), RNG.standard_normal((4, 3)), RNG.standard_normal(4)
    out = fd_check(F.linear, [x, w, b])
    np.testing.assert_allclose(out.detach().numpy(), x @ w.T + b, rtol=1e-12)
    out = fd_check(F.linear, [RNG.standard_normal((2, 2, 3)), w])
    assert tuple(out.shape) == (2, 2, 4)


@pytest.mark.parametrize("x_shape, w_shape", [((4, 5), (0, 5)), ((4, 0), (3, 0)), ((0, 5), (3, 5))])
def test_linear_with_an_empty_dimension_has_gradients_of_the_closed_form(x_shape, w_shape):
    """(torch gives these too: x's gradient g @ w, w's g.T @ x, the bias's the column sums of g.)"""
    x = minidl.tensor(RNG.standard_normal(x_shape), requires_grad=True)
    w = minidl.tensor(RNG.standard_normal(w_shape), requires_grad=True)
    b = minidl.tensor(RNG.standard_normal(w_shape[0]), requires_grad=True)
    g = RNG.standard_normal((x_shape[0], w_shape[0]))
    (F.linear(x, w, b) * minidl.tensor(g)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), g @ w.detach().numpy())
    np.testing.assert_allclose(w.grad.numpy(), g.T @ x.detach().numpy())
    np.testing.assert_allclose(b.grad.numpy(), g.sum(0))


def test_linear_module_init_and_forward():
    minidl.manual_seed(0)
    lin = nn.Linear(50, 40, dtype=minidl.float64)
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    bound = 1 / math.sqrt(50)   # kaiming_uniform_(a=sqrt(5)) gives the same bound as the bias
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(b).max() <= bound
    assert lin.weight.requires_grad and isinstance(lin.weight, nn.Parameter)
    x = RNG.standard_normal((3, 50))
    np.testing.assert_allclose(lin(T(x)).detach().numpy(), x @ w.T + b, rtol=1e-12)
    nobias = nn.Linear(3, 2, bias=False)
    assert nobias.bias is None and [n for n, _ in nobias.named_parameters()] == ["weight"]
    assert nobias(minidl.randn(4, 3)).dtype is minidl.float32


def test_layer_norm():
    x = RNG.standard_normal((2, 3, 4))
    w, b = RNG.standard_normal(4), RNG.standard_normal(4)
    out = fd_check(lambda x, w, b: F.layer_norm(x, (4,), w, b, eps=1e-5), [x, w, b])
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(out.detach().numpy(), (x - mu) / np.sqrt(var + 1e-5) * w + b, rtol=1e-10)
    out2 = fd_check(lambda x: F.layer_norm(x, (3, 4), eps=1e-3), [x])
    mu, var = x.mean((1, 2), keepdims=True), x.var((1, 2), keepdims=True)
    np.testing.assert_allclose(out2.detach().numpy(), (x - mu) / np.sqrt(var + 1e-3), rtol=1e-10)
    ln = nn.LayerNorm(4, eps=1e-6, dtype=minidl.float64)
    assert ln.weight.tolist() == [1.0] * 4 and ln.bias.tolist() == [0.0] * 4
    np.testing.assert_allclose(ln(T(x)).detach().numpy(), F.layer_norm(T(x), (4,), eps=1e-6).numpy())
    plain = nn.LayerNorm([3, 4], elementwise_affine=False)
    assert list(plain.parameters()) == [] and plain.weight is None
    with pytest.raises(RuntimeError):
        F.layer_norm(T(x), (5,))


def test_layer_norm_second_order_gradients():
    """layer_norm is one node with a closed-form backward; under create_graph that backward must
    stay differentiable in x, weight and bias (finite differences of the first gradients)."""
    from test_gradcheck import gradgradcheck
    gradgradcheck(lambda x, w, b: F.layer_norm(x, (4,), w, b), [RNG.standard_normal((2, 4)),
                                                                RNG.standard_normal(4), RNG.standard_normal(4)])
    gradgradcheck(lambda x: F.layer_norm(x, (2, 3)), [RNG.standard_normal((2, 2, 3))])


@pytest.mark.parametrize("table", [(5, 0), (0, 3)])
def test_embedding_of_an_empty_table_or_ids_has_an_empty_gradient(table):
    """(as torch: a table of no columns looked up, or no ids looked up in any table)"""
    ids = minidl.tensor([[3, 0], [2, 2]] if table[0] else np.zeros((2, 0), np.int64))
    w = minidl.zeros(table, requires_grad=True)
    out = F.embedding(ids, w)
    out.sum().backward()
    assert tuple(out.shape) == (*ids.shape, table[1]) and tuple(w.grad.shape) == table


def test_embedding_and_padding_idx():
    w = RNG.standard_normal((6, 3))
    idx = minidl.tensor([[0, 2, 5], [2, 2, 1]])
    out = fd_check(lambda w: F.embedding(idx, w), [w])
    np.testing.assert_array_equal(out.detach().numpy(), w[idx.numpy()])
    wt = T(w, True)
    F.embedding(idx, wt, padding_idx=2).sum().backward()
    g = wt.grad.numpy()
    assert (g[2] == 0).all() and g[0].tolist() == [1.0] * 3 and g[5].tolist() == [1.0] * 3 and (g[1] == 1).all()
    emb = nn.Embedding(10, 4, padding_idx=-1)
    assert emb.padding_idx == 9 and (emb.weight[9].detach().numpy() == 0).all()
    y = emb(minidl.tensor([9, 3, 9]))
    (y * y + y).sum().backward()
    assert (emb.weight.grad[9].numpy() == 0).all() and (emb.weight.grad[3].numpy() != 0).any()
    assert repr(emb) == "Embedding(10, 4, padding_idx=9)"
    pre = nn.Embedding.from_pretrained(T(w))
    assert not pre.weight.requires_grad and pre(minidl.tensor([1])).tolist() == [w[1].tolist()]


def test_dropout():
    minidl.manual_seed(0)
    x = minidl.ones(200, 100, dtype=minidl.float64, requires_grad=True)
    y = F.dropout(x, 0.3)
    vals = np.unique(y.detach().numpy())
    np.testing.assert_allclose(vals, [0.0, 1 / 0.7])
    frac = (y.detach().numpy() == 0).mean()
    assert 0.27 < frac < 0.33
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.detach().numpy())   # grad is the scaled mask
    assert F.dropout(x, 0.3, training=False) is x
    assert (F.dropout(x, 1.0).detach().numpy() == 0).all()
    with pytest.raises(ValueError):
        nn.Dropout(1.5)
    d = nn.Dropout(0.5)
    assert d(x) is not x
    d.eval()
    assert d(x) is x
    z = minidl.ones(1000)
    out = F.dropout(z, 0.5, inplace=True)
    assert out is z and set(np.unique(z.numpy())) == {0.0, 2.0}


@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
@pytest.mark.parametrize("pad", [(1, 2), (2, 0, 1, 3), (3, 3)])
def test_pad_modes_against_numpy_with_gradients(mode, np_mode, pad):
    x = RNG.standard_normal((2, 4, 5))
    out = fd_check(lambda x: F.pad(x, pad, mode=mode), [x])
    widths = [(0, 0)] * (3 - len(pad) // 2) + [tuple(pad[i:i + 2]) for i in range(len(pad) - 2, -1, -2)]
    np.testing.assert_array_equal(out.detach().numpy(), np.pad(x, widths, mode=np_mode))


def test_pad_mode_errors():
    x = minidl.randn(1, 2, 3)
    with pytest.raises(RuntimeError, match=r"pad: reflect padding \(3, 0\) of dim 2 .* at most 2"):
        F.pad(x, (3, 0), mode="reflect")
    with pytest.raises(NotImplementedError, match="pad: mode 'mirror'"):
        F.pad(x, (1, 1), mode="mirror")
    with pytest.raises(RuntimeError, match="doesn't take in value"):
        F.pad(x, (1, 1), mode="replicate", value=2.0)


def test_one_hot_pad_normalize():
    t = minidl.tensor([[0, 2], [1, 0]])
    oh = F.one_hot(t, 4)
    assert oh.dtype is minidl.int64 and oh.tolist() == [[[1, 0, 0, 0], [0, 0, 1, 0]], [[0, 1, 0, 0], [1, 0, 0, 0]]]
    assert tuple(F.one_hot(minidl.tensor([3, 1])).shape) == (2, 4)
    with pytest.raises(RuntimeError):
        F.one_hot(minidl.tensor([4]), 3)
    x = RNG.standard_normal((2, 3))
    out = fd_check(lambda x: F.pad(x, (1, 2), value=0.5), [x])
    np.testing.assert_array_equal(out.detach().numpy(), np.pad(x, ((0, 0), (1, 2)), constant_values=0.5))
    out = fd_check(lambda x: F.normalize(x, dim=1), [x])
    np.testing.assert_allclose(out.detach().numpy(), x / np.linalg.norm(x, axis=1, keepdims=True), rtol=1e-12)
    out = fd_check(lambda x: F.normalize(x, p=1, dim=0), [x])
    np.testing.assert_allclose(out.detach().numpy(), x / np.abs(x).sum(0, keepdims=True), rtol=1e-12)
    assert F.normalize(minidl.zeros(2, 3)).tolist() == [[0.0] * 3] * 2


# -- losses --------------------------------------------------------------------------------------
def _ref_reduce(loss, reduction):
    return {"mean": loss.mean(), "sum": loss.sum(), "none": loss}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses(reduction):
    a = RNG.standard_normal((3, 4))
    b = a + away_from(RNG.standard_normal((3, 4)) * 2, (-0.5, 0.0, 0.5))
    d = a - b
    cases = [
        (F.mse_loss, {}, d ** 2),
        (F.l1_loss, {}, np.abs(d)),
        (F.smooth_l1_loss, {"beta": 0.5}, np.where(np.abs(d) < 0.5, 0.5 * d ** 2 / 0.5, np.abs(d) - 0.25)),
        (F.smooth_l1_loss, {"beta": 0.0}, np.abs(d)),
        (F.huber_loss, {"delta": 0.5}, np.where(np.abs(d) < 0.5, 0.5 * d ** 2, 0.5 * (np.abs(d) - 0.25))),
    ]
    for fn, kw, ref in cases:
        out = fd_check(lambda x, y: fn(x, y, reduction=reduction, **kw), [a, b])
        np.testing.assert_allclose(out.detach().numpy(), _ref_reduce(ref, reduction), rtol=1e-12)


def _np_log_softmax(x, axis=1):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def _np_nll(logp, target, weight=None, ignore_index=-100, reduction="mean"):
    n_classes = logp.shape[1]
    lp = np.moveaxis(logp, 1, -1).reshape(-1, n_classes)
    t = target.reshape(-1)
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    w = (weight[safe] if weight is not None else np.ones(len(t))) * valid
    loss = -lp[np.arange(len(t)), safe] * w
    if reduction == "none":
        return loss.reshape(target.shape)
    return loss.sum() if reduction == "sum" else loss.sum() / w.sum()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_and_cross_entropy_indices(reduction, weighted):
    x = RNG.standard_normal((4, 3, 2))
    target = np.array([[0, 2], [1, -100], [2, 2], [0, 1]])
    weight = np.array([0.3, 1.0, 2.0]) if weighted else None
    tt = minidl.tensor(target)
    wt = T(weight) if weighted else None
    out = fd_check(lambda x: F.cross_entropy(x, tt, weight=wt, reduction=reduction), [x])
    np.testing.assert_allclose(out.detach().numpy(),
                               _np_nll(_np_log_softmax(x), target, weight, reduction=reduction), rtol=1e-10)
    out = fd_check(lambda x: F.nll_loss(x, tt, weight=wt, reduction=reduction), [x])
    np.testing.assert_allclose(out.detach().numpy(), _np_nll(x, target, weight, reduction=reduction), rtol=1e-10)
    # modules
    ce = nn.CrossEntropyLoss(weight=wt, reduction=reduction)
    np.testing.assert_allclose(ce(T(x), tt).numpy(), F.cross_entropy(T(x), tt, wt, reduction=reduction).numpy())
    nll = nn.NLLLoss(weight=wt, reduction=reduction, ignore_index=2)
    target2 = np.where(target < 0, 1, target)
    np.testing.assert_allclose(nll(T(x), minidl.tensor(target2)).numpy(),
                               _np_nll(x, target2, weight, ignore_index=2, reduction=reduction), rtol=1e-10)
    with pytest.raises(IndexError):
        nll(T(x), tt)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_label_smoothing(reduction):
    x = RNG.standard_normal((5, 4))
    target = np.array([0, 3, -100, 1, 1])
    weight = np.array([1.0, 0.5, 2.0, 3.0])
    ls, C = 0.2, 4
    logp = _np_log_softmax(x)
    for w in (None, weight):
        wt = None if w is None else T(w)
        out = fd_check(lambda x: F.cross_entropy(x, minidl.tensor(target), weight=wt, reduction=reduction,
                                                 label_smoothing=ls), [x])
        valid = target != -100
        ww = np.ones(C) if w is None else w
        smooth = -(logp * ww).sum(1) * valid
        if reduction == "mean":
            denom = ww[np.where(valid, target, 0)][valid].sum()
            smooth = smooth.sum() / denom
        elif reduction == "sum":
            smooth = smooth.sum()
        ref = (1 - ls) * _np_nll(logp, target, w, reduction=reduction) + smooth * ls / C
        np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-10)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_probabilities(reduction):
    x = RNG.standard_normal((3, 4, 2))
    p = RNG.random((3, 4, 2))
    p /= p.sum(1, keepdims=True)
    weight = np.array([1.0, 0.5, 2.0, 3.0])
    for w, ls in ((None, 0.0), (weight, 0.1)):
        wt = None if w is None else T(w)
        out = fd_check(lambda x, p: F.cross_entropy(x, p, weight=wt, reduction=reduction, label_smoothing=ls),
                       [x, p])
        q = p * (1 - ls) + ls / 4
        terms = _np_log_softmax(x) * q * (1 if w is None else w[None, :, None])
        ref = {"none": -terms.sum(1), "sum": -terms.sum(), "mean": -terms.sum() / 6}[reduction]
        np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-10)


def test_cross_entropy_unbatched_and_huge_logits():
    x = T([1e4, -1e4, 0.5], requires_grad=True)
    loss = F.cross_entropy(x, minidl.tensor(1))
    loss.backward()
    assert loss.item() == 2e4
    np.testing.assert_allclose(x.grad.numpy(), [1.0, -1.0, 0.0], atol=1e-300)
    for dtype in (minidl.float32, minidl.float64):
        logits = minidl.tensor([[1e4, 0.0, -1e4], [-1e4, 1e4, 3.0]], dtype=dtype, requires_grad=True)
        loss = F.cross_entropy(logits, minidl.tensor([0, 2]), reduction="none")
        loss.sum().backward()
        assert loss.tolist() == [0.0, 1e4 - 3.0]
        assert np.isfinite(logits.grad.numpy()).all()
        lsm = F.log_softmax(logits, 1)
        assert lsm.tolist()[0] == [0.0, -1e4, -2e4]
    assert F.cross_entropy(T([1.0, 2.0, 3.0]), minidl.tensor(0), reduction="none").ndim == 0


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(reduction):
    p = RNG.uniform(0.05, 0.95, (3, 4))
    t = RNG.random((3, 4))
    w = RNG.random((3, 4))
    out = fd_check(lambda p, t: F.binary_cross_entropy(p, t, reduction=reduction), [p, t])
    ref = -(t * np.log(p) + (1 - t) * np.log(1 - p))
    np.testing.assert_allclose(out.detach().numpy(), _ref_reduce(ref, reduction), rtol=1e-12)
    out = F.binary_cross_entropy(T(p), T(t), weight=T(w), reduction=reduction)
    np.testing.assert_allclose(out.numpy(), _ref_reduce(ref * w, reduction), rtol=1e-12)
    assert nn.BCELoss(reduction=reduction)(T(p), T(t)).numpy() == pytest.approx(_ref_reduce(ref, reduction))
    edge = F.binary_cross_entropy(T([0.0, 1.0]), T([1.0, 0.0]), reduction="none")
    assert edge.tolist() == [100.0, 100.0]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_with_logits(reduction):
    x = away_from(RNG.standard_normal((3, 4)) * 3)
    t = RNG.random((3, 4))
    pw = np.array([0.5, 1.0, 2.0, 3.0])
    w = RNG.random((3, 4))

    def ref(x, t, pw=1.0, w=1.0):
        s = 1 / (1 + np.exp(-x))
        return -(pw * t * np.log(s) + (1 - t) * np.log(1 - s)) * w

    out = fd_check(lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction=reduction), [x, t])
    np.testing.assert_allclose(out.detach().numpy(), _ref_reduce(ref(x, t), reduction), rtol=1e-10)
    out = fd_check(lambda x, t, pw: F.binary_cross_entropy_with_logits(x, t, pos_weight=pw, reduction=reduction),
                   [x, t, pw])
    np.testing.assert_allclose(out.detach().numpy(), _ref_reduce(ref(x, t, pw), reduction), rtol=1e-10)
    mod = nn.BCEWithLogitsLoss(weight=T(w), pos_weight=T(pw), reduction=reduction)
    np.testing.assert_allclose(mod(T(x), T(t)).numpy(), _ref_reduce(ref(x, t, pw, w), reduction), rtol=1e-10)
    big = T([1e4, -1e4, 0.0], requires_grad=True)
    loss = F.binary_cross_entropy_with_logits(big, T([0.0, 1.0, 1.0]), reduction="sum")
    loss.backward()
    np.testing.assert_allclose(loss.item(), 2e4 + math.log(2))
    np.testing.assert_allclose(big.grad.numpy(), [1.0, -1.0, -0.5])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none", "batchmean"])
def test_kl_div(reduction):
    logq = _np_log_softmax(RNG.standard_normal((3, 4)))
    p = np.exp(_np_log_softmax(RNG.standard_normal((3, 4))))
    p[0, 0] = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0) - p * logq
    red = {"batchmean": ref.sum() / 3}.get(reduction)
    red = _ref_reduce(ref, reduction) if red is None else red
    out = fd_check(lambda q: F.kl_div(q, T(p), reduction=reduction), [logq])
    np.testing.assert_allclose(out.detach().numpy(), red, rtol=1e-10)
    logp = np.log(np.where(p > 0, p, 1e-3))
    out = fd_check(lambda q, lp: F.kl_div(q, lp, reduction=reduction, log_target=True), [logq, logp])
    ref2 = np.exp(logp) * (logp - logq)
    red2 = ref2.sum() / 3 if reduction == "batchmean" else _ref_reduce(ref2, reduction)
    np.testing.assert_allclose(out.detach().numpy(), red2, rtol=1e-10)
    mod = nn.KLDivLoss(reduction=reduction)
    np.testing.assert_allclose(mod(T(logq), T(p)).numpy(), red, rtol=1e-10)


def test_loss_modules_match_functional():
    a, b = T(RNG.standard_normal((3, 2))), T(RNG.standard_normal((3, 2)))
    assert nn.MSELoss()(a, b).item() == F.mse_loss(a, b).item()
    assert nn.L1Loss(reduction="sum")(a, b).item() == F.l1_loss(a, b, reduction="sum").item()
    assert nn.SmoothL1Loss(beta=0.3)(a, b).item() == F.smooth_l1_loss(a, b, beta=0.3).item()
    assert nn.MSELoss(reduction="none")(a, b).shape == (3, 2)
    with pytest.raises(ValueError):
        F.mse_loss(a, b, reduction="avg")


def test_linear_rejects_mismatched_shapes_and_dtypes():
    F = minidl.nn.functional
    with pytest.raises(RuntimeError, match=r"linear: input \[2, 3\] and weight \[4, 5\]"):
        F.linear(minidl.randn(2, 3), minidl.randn(4, 5))
    with pytest.raises(RuntimeError, match=r"linear: bias of shape \[3\]"):
        F.linear(minidl.randn(2, 5), minidl.randn(4, 5), minidl.randn(3))
    with pytest.raises(RuntimeError, match="linear: expected input, weight and bias of one dtype"):
        F.linear(minidl.randn(2, 5, dtype=minidl.float64), minidl.randn(4, 5))
