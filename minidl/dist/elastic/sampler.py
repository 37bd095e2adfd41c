"""ElasticSampler: a DistributedSampler that keeps its place in the epoch across a change of world size.

It counts the samples the job has consumed in this epoch (``record_batch``, on every rank alike); after a
rebuild, ``reset()`` splits what is left of the epoch's order among the new ranks, so no sample of the epoch
is seen twice or skipped because the group changed (Horovod's ElasticSampler, in our words).
"""
from __future__ import annotations

import math

import minidl

from ...utils.data.sampler import Sampler
from .. import state as dist_state


class ElasticSampler(Sampler):
    def __init__(self, dataset, shuffle: bool = True, seed: int = 0):
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self.epoch, self.processed = 0, 0
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.processed = epoch, 0
        self.reset()

    def record_batch(self, batch_size: int) -> None:
        """Count one step's samples over every rank: ``batch_size`` per rank."""
        self.processed += batch_size * self.num_replicas

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "processed": self.processed}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.processed = state["epoch"], state["processed"]
        self.reset()

    def reset(self) -> None:
        """This rank's share of the rest of the epoch, at the current world size."""
        self.num_replicas = dist_state.get_world_size() if dist_state.is_initialized() else 1
        self.rank = dist_state.get_rank() if dist_state.is_initialized() else 0
        order = (minidl.randperm(len(self.dataset), generator=minidl.Generator().manual_seed(self.seed + self.epoch))
                 .tolist() if self.shuffle else list(range(len(self.dataset))))
        rest = order[min(self.processed, len(order)):]
        self.num_samples = math.ceil(len(rest) / self.num_replicas)
        pad = self.num_samples * self.num_replicas - len(rest)   # (repeated from the start to split evenly, as
        if rest:                                                  # DistributedSampler pads)
            rest += (rest * math.ceil(pad / len(rest)))[:pad]
        self.indices = rest[self.rank::self.num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
