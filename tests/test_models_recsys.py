"""minidl.models' recommenders and their metrics: the metrics against brute-force counts and loops, the models
against the same models written in torch, their sparse embeddings' gradients against dense ones; and the
package's face, which imports a family on first use."""
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

import minidl
import minidl.models
from minidl.models import NeuMF, WideDeep
from minidl.models.metrics import auc, hit_ratio_and_ndcg


# ------------------------------------------------------------------------------- package
def test_import_minidl_leaves_the_models_and_the_models_their_families_until_used():
    code = ("import sys, minidl; print('minidl.models' in sys.modules); import minidl.models; "
            "print('minidl.models.recsys' in sys.modules); minidl.models.NeuMF; print('minidl.models.recsys' in "
            "sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True"]


def test_the_package_face_names_each_family_and_its_models():
    assert minidl.models.NeuMF is minidl.models.recsys.NeuMF and minidl.models.metrics.auc is auc
    assert {"NeuMF", "WideDeep", "recsys", "metrics"} <= set(minidl.models.__all__) <= set(dir(minidl.models))
    with pytest.raises(AttributeError, match="module 'minidl.models' has no attribute 'GPT2'"):
        minidl.models.GPT2


# ------------------------------------------------------------------------------- metrics
def test_auc_is_the_share_of_positive_negative_pairs_ranked_right():
    rs = np.random.RandomState(0)
    labels = rs.rand(300) < 0.3
    scores = np.round(rs.randn(300) + labels, 1)   # (rounded: many ties, which count one half)
    pairs = [(p > n) + 0.5 * (p == n) for p in scores[labels] for n in scores[~labels]]
    assert auc(labels, scores) == pytest.approx(np.mean(pairs), abs=1e-12)
    assert auc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0 and auc([1, 0], [3.0, 3.0]) == 0.5
    with pytest.raises(ValueError, match="needs both classes, got 2 positives and 0 negatives"):
        auc([1, 1], [0.2, 0.4])


def test_hit_ratio_and_ndcg_rank_the_held_out_item_among_its_negatives():
    rs = np.random.RandomState(1)
    scores = np.round(rs.randn(50, 100), 1)
    hits, gains = [], []
    for row in scores:
        rank = sum(negative >= row[0] for negative in row[1:])   # (a tie counts against the held-out item)
        hits.append(rank < 10)
        gains.append(1 / math.log2(rank + 2) if rank < 10 else 0.0)
    hr, ndcg = hit_ratio_and_ndcg(scores, k=10)
    assert hr == pytest.approx(np.mean(hits)) and ndcg == pytest.approx(np.mean(gains))
    assert hit_ratio_and_ndcg(np.array([[5.0] + [1.0] * 99]), k=10) == (1.0, 1.0)
    assert hit_ratio_and_ndcg(np.ones((3, 100)), k=10) == (0.0, 0.0)   # (constant scores: no hit)


def test_the_metrics_take_tensors_as_arrays():
    labels, scores = minidl.tensor([1, 0, 1, 0]), minidl.tensor([0.9, 0.8, 0.3, 0.1])
    assert auc(labels, scores) == auc(labels.numpy(), scores.numpy()) == 0.75
    ranked = minidl.tensor([[0.5, 0.9, 0.1], [0.5, 0.1, 0.2]])
    assert hit_ratio_and_ndcg(ranked, k=1) == (0.5, 0.5)


# -------------------------------------------------------------------------------- models
def _torch_mlp(widths):
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return layers


def _copy_to_torch(module, torch_params):
    with torch.no_grad():
        for (name, p), t in zip(module.named_parameters(), torch_params):
            assert tuple(t.shape) == tuple(p.shape), name
            t.copy_(torch.from_numpy(p.detach().numpy().copy()))


def _check_gradients(module, torch_params):
    for (name, p), t in zip(module.named_parameters(), torch_params):
        grad = p.grad.to_dense() if p.grad.is_sparse else p.grad
        np.testing.assert_allclose(grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_neumf_equals_the_same_model_in_torch():
    minidl.manual_seed(0)
    model = NeuMF(7, 9, factors=4, layers=(8, 6, 4))
    for table in (model.gmf_user, model.gmf_item, model.mlp_user, model.mlp_item):
        minidl.nn.init.normal_(table.weight, std=0.5)   # (large enough for the ReLUs to matter)
    gu, gi, mu, mi = (torch.nn.Embedding(n, d) for n, d in ((7, 4), (9, 4), (7, 4), (9, 4)))
    mlp = torch.nn.Sequential(*_torch_mlp((8, 6, 4)))
    predict = torch.nn.Linear(8, 1)
    params = [gu.weight, gi.weight, mu.weight, mi.weight] + list(mlp.parameters()) + list(predict.parameters())
    _copy_to_torch(model, params)
    users, items = np.array([0, 3, 6, 3]), np.array([8, 1, 0, 1])
    out = model(minidl.from_numpy(users), minidl.from_numpy(items))
    u, i = torch.from_numpy(users), torch.from_numpy(items)
    want = predict(torch.cat([gu(u) * gi(i), mlp(torch.cat([mu(u), mi(i)], 1))], 1)).squeeze(1)
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    labels = np.array([1, 0, 1, 0], dtype=np.float32)
    minidl.nn.functional.binary_cross_entropy_with_logits(out, minidl.from_numpy(labels)).backward()
    torch.nn.functional.binary_cross_entropy_with_logits(want, torch.from_numpy(labels)).backward()
    _check_gradients(model, params)
    assert model.gmf_user.weight.grad.is_sparse


def test_wide_deep_equals_the_same_model_in_torch():
    minidl.manual_seed(1)
    model = WideDeep(5, 8, cross_buckets=11, dim=3, hidden=(4, 2))
    minidl.nn.init.normal_(model.wide.weight, std=0.5)
    minidl.nn.init.normal_(model.deep.weight, std=0.5)
    wide, deep = torch.nn.Embedding(5 + 8 + 11, 1), torch.nn.Embedding(13, 3)
    mlp = torch.nn.Sequential(*_torch_mlp((6, 4, 2)), torch.nn.Linear(2, 1))
    params = [wide.weight, deep.weight] + list(mlp.parameters())
    _copy_to_torch(model, params)
    users, items = np.array([0, 4, 2, 4]), np.array([7, 0, 3, 0])
    out = model(minidl.from_numpy(users), minidl.from_numpy(items))
    u, i = torch.from_numpy(users), torch.from_numpy(items)
    cross = 13 + (u * 1_000_003 + i) % 11
    want = wide(torch.stack([u, 5 + i, cross], 1)).sum((1, 2)) + \
        mlp(deep(torch.stack([u, 5 + i], 1)).flatten(1)).squeeze(1)
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    (out ** 2).sum().backward()
    (want ** 2).sum().backward()
    _check_gradients(model, params)


# (users < 5 and items < 8: within both models built below)
USERS, ITEMS = np.array([0, 4, 2, 4]), np.array([7, 0, 3, 0])
NEUMF_ROWS = {"gmf_user": USERS, "gmf_item": ITEMS, "mlp_user": USERS, "mlp_item": ITEMS}
WIDE_DEEP_ROWS = {"wide": np.r_[USERS, 5 + ITEMS, 13 + (USERS * 1_000_003 + ITEMS) % 11],   # (+ the crosses)
                  "deep": np.r_[USERS, 5 + ITEMS]}


@pytest.mark.parametrize("build, looked_up", [
    (lambda sparse: NeuMF(5, 8, factors=4, layers=(8, 6, 4), sparse=sparse), NEUMF_ROWS),
    (lambda sparse: WideDeep(5, 8, cross_buckets=11, dim=3, hidden=(4, 2), sparse=sparse), WIDE_DEEP_ROWS),
], ids=["NeuMF", "WideDeep"])
def test_sparse_embeddings_give_sparse_gradients_of_the_rows_looked_up(build, looked_up):
    """Each table's gradient is sparse, holds the rows the batch looked up and no other, and equals the
    same model's dense gradient; the dense layers' gradients are dense."""
    grads = []
    for sparse in (True, False):
        minidl.manual_seed(2)
        model = build(sparse)
        for name in looked_up:
            minidl.nn.init.normal_(getattr(model, name).weight, std=0.5)
        (model(minidl.from_numpy(USERS), minidl.from_numpy(ITEMS)) ** 2).sum().backward()
        grads.append({name: p.grad for name, p in model.named_parameters()})
    for name, grad in grads[0].items():
        table = name.removesuffix(".weight")
        assert grad.is_sparse == (table in looked_up), name
        if grad.is_sparse:
            assert grad.coalesce().indices()[0].tolist() == sorted(set(looked_up[table].tolist())), name
            grad = grad.to_dense()
        np.testing.assert_allclose(grad.numpy(), grads[1][name].numpy(), rtol=1e-6, atol=1e-7, err_msg=name)
