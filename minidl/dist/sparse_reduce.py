"""The all-reduce of a sparse gradient, as torch's DDP does it: not a dense sum over the whole
table but every rank's entries gathered (indices and values, of different counts per rank),
concatenated, averaged and coalesced."""
from __future__ import annotations

from .. import cat, int64, sparse_coo_tensor, tensor, zeros
from .collectives import all_gather
from .state import get_world_size


def all_gather_sparse_mean(grad, size, dtype, device, group=None):
    """The mean over the group's ranks of each rank's sparse ``grad`` (None: no entries), coalesced.
    Every rank gathers the entry counts, then the entries padded to the largest count."""
    ranks = get_world_size(group)
    if grad is None:
        grad = sparse_coo_tensor(zeros(1, 0, dtype=int64, device=device),
                                 zeros((0,) + tuple(size[1:]), dtype=dtype, device=device), size)
    indices, values = grad._indices(), grad._values()
    counts = [tensor([0], device=device) for _ in range(ranks)]
    all_gather(counts, tensor([indices.shape[1]], device=device), group=group)
    counts = [int(c.item()) for c in counts]
    top = max(counts)
    padded_indices = zeros(indices.shape[0], top, dtype=int64, device=device)
    padded_indices[:, :indices.shape[1]] = indices
    padded_values = zeros((top,) + tuple(values.shape[1:]), dtype=values.dtype, device=device)
    padded_values[:values.shape[0]] = values
    every_indices = [zeros(indices.shape[0], top, dtype=int64, device=device) for _ in range(ranks)]
    every_values = [zeros((top,) + tuple(values.shape[1:]), dtype=values.dtype, device=device) for _ in range(ranks)]
    all_gather(every_indices, padded_indices, group=group)
    all_gather(every_values, padded_values, group=group)
    indices = cat([i[:, :n] for i, n in zip(every_indices, counts)], dim=1)
    values = cat([v[:n] for v, n in zip(every_values, counts)]) / ranks
    return sparse_coo_tensor(indices, values, size).coalesce()
