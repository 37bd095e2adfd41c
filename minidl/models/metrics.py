"""The recommenders' metrics as their papers define them, in numpy (arrays, or CPU tensors, in; floats out).

AUC: the chance that a random positive scores above a random negative (ties count one half),
from the ranks of the scores (the Mann-Whitney statistic). HR@k and NDCG@k (NCF's protocol): each
user's held-out item is ranked among its sampled negatives; it is a hit when fewer than k
negatives score at least as high (a tie counts against it), and its NDCG is 1 / log2(rank + 2)
for a hit at 0-based rank ``rank``, 0 otherwise.
"""
import numpy as np


def auc(labels, scores) -> float:
    labels, scores = np.asarray(labels).astype(bool), np.asarray(scores, dtype=np.float64)
    positives, negatives = labels.sum(), (~labels).sum()
    if not positives or not negatives:
        raise ValueError(f"auc: needs both classes, got {positives} positives and {negatives} negatives")
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_scores)) + 1]   # (runs of equal scores share a mean rank)
    ends = np.r_[starts[1:], len(scores)]
    ranks[order] = np.repeat((starts + ends + 1) / 2, ends - starts)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def hit_ratio_and_ndcg(scores, k=10) -> tuple:
    """scores: (users, 1 + negatives), column 0 the held-out item's. Returns (HR@k, NDCG@k)."""
    scores = np.asarray(scores, dtype=np.float64)
    rank = (scores[:, 1:] >= scores[:, :1]).sum(1)
    hit = rank < k
    return float(hit.mean()), float(np.where(hit, 1 / np.log2(rank + 2), 0.0).mean())
