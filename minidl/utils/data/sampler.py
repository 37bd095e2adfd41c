"""Samplers, as in ``torch.utils.data.sampler``: iterables of dataset indices (or of index batches)."""
from __future__ import annotations

import minidl


__all__ = [
    "BatchSampler",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
]

_CHUNK = 32  # RandomSampler with replacement draws this many indices at a time (lazily, like PyTorch)


def _fresh_generator():
    """A generator seeded from the global RNG (so ``minidl.manual_seed`` makes shuffling reproducible)."""
    seed = int(minidl.randint(0, 2 ** 63 - 1, ()))   # (the default generator: a simulated rank's its own)
    return minidl.Generator().manual_seed(seed)


class Sampler:
    """Base class: ``__iter__`` yields indices; ``__len__`` is optional."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """Random indices: a fresh permutation per pass (``num_samples`` may exceed the length: then several
    permutations follow each other), or, with ``replacement``, independent draws made lazily in chunks."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={self.replacement}")
        if not isinstance(self.num_samples, int) or isinstance(self.num_samples, bool) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        generator = _fresh_generator() if self.generator is None else self.generator
        if self.replacement:
            for _ in range(self.num_samples // _CHUNK):
                yield from minidl.randint(0, n, (_CHUNK,), generator=generator).tolist()
            rest = self.num_samples % _CHUNK
            if rest:
                yield from minidl.randint(0, n, (rest,), generator=generator).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from minidl.randperm(n, generator=generator).tolist()
            rest = self.num_samples % n
            if rest:
                yield from minidl.randperm(n, generator=generator).tolist()[:rest]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices, in a random order."""

    def __init__(self, indices, generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        for i in minidl.randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """Indices ``0..len(weights)-1`` drawn with probabilities proportional to ``weights``."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        import numpy as np
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        w = np.asarray(weights.tolist() if hasattr(weights, "tolist") and not isinstance(weights, np.ndarray)
                       else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError("weights should be a 1d sequence but given "
                             f"weights have shape {tuple(w.shape)}")
        self.weights = minidl.from_numpy(w)
        self._w = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self):
        if not self.replacement and self.num_samples > len(self._w):
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        g = minidl.random.numpy_generator(self.generator)
        yield from g.choice(len(self._w), size=self.num_samples, replace=self.replacement,
                            p=self._w / self._w.sum()).tolist()

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """Groups the indices of ``sampler`` into lists of ``batch_size`` (the last one shorter unless
    ``drop_last``)."""

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
