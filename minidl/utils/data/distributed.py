"""DistributedSampler, as in ``torch.utils.data.distributed``: each replica gets its own slice of the
(optionally shuffled, padded or trimmed) indices."""
from __future__ import annotations

import math

import minidl

from .sampler import Sampler


__all__ = ["DistributedSampler"]


def _process_group():
    """(world_size, rank) of an initialised default process group, or None."""
    try:
        from ... import dist
    except ImportError:
        return None
    is_init = getattr(dist, "is_initialized", None)
    if callable(is_init) and is_init():
        return dist.get_world_size(), dist.get_rank()
    return None


class DistributedSampler(Sampler):
    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            group = _process_group()
            if group is None:
                raise RuntimeError("DistributedSampler: a process group is required to infer num_replicas and "
                                   "rank (none is initialised); pass num_replicas= and rank= explicitly")
            num_replicas = group[0] if num_replicas is None else num_replicas
            rank = group[1] if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        if self.drop_last and len(self.dataset) % self.num_replicas != 0:
            self.num_samples = math.ceil((len(self.dataset) - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(len(self.dataset) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self):
        if self.shuffle:
            g = minidl.Generator().manual_seed(self.seed + self.epoch)
            indices = minidl.randperm(len(self.dataset), generator=g).tolist()
        else:
            indices = list(range(len(self.dataset)))
        if not self.drop_last:
            padding_size = self.total_size - len(indices)
            if padding_size <= len(indices):
                indices += indices[:padding_size]
            else:
                indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
        else:
            indices = indices[:self.total_size]
        assert len(indices) == self.total_size
        indices = indices[self.rank:self.total_size:self.num_replicas]
        assert len(indices) == self.num_samples
        return iter(indices)

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """Set the epoch: with ``shuffle``, each epoch gets its own order (seeded by ``seed + epoch``)."""
        self.epoch = epoch
