"""minidl.utils.data in one process: datasets, samplers, DistributedSampler, collation, DataLoader."""
import math
import resource
import tracemalloc
from collections import namedtuple

import numpy as np
import pytest

import minidl
from minidl.utils.data import (
    BatchSampler,
    ChainDataset,
    ConcatDataset,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    StackDataset,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
    default_collate,
    default_convert,
    get_worker_info,
    random_split,
)


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return i * i

    def __len__(self):
        return self.n


class Count(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


# -- datasets --------------------------------------------------------------------------------------

def test_tensor_dataset():
    x, y = minidl.arange(12).reshape(6, 2), minidl.arange(6)
    ds = TensorDataset(x, y)
    assert len(ds) == 6
    a, b = ds[4]
    assert a.tolist() == [8, 9] and b.item() == 4
    with pytest.raises(AssertionError, match="Size mismatch"):
        TensorDataset(x, minidl.arange(5))


def test_concat_subset_stack_chain():
    c = ConcatDataset([Squares(3), Squares(4)])
    assert len(c) == 7 and [c[i] for i in range(7)] == [0, 1, 4, 0, 1, 4, 9] and c[-1] == 9
    assert c.cumulative_sizes == [3, 7]
    assert len(Squares(2) + Squares(5)) == 7
    s = Subset(Squares(10), [9, 2, 5])
    assert len(s) == 3 and [s[i] for i in range(3)] == [81, 4, 25]
    st = StackDataset(Squares(3), Squares(3))
    assert st[2] == (4, 4)
    assert StackDataset(a=Squares(2), b=Squares(2))[1] == {"a": 1, "b": 1}
    with pytest.raises(ValueError):
        StackDataset(Squares(2), Squares(3))
    assert list(ChainDataset([Count(2), Count(3)])) == [0, 1, 0, 1, 2]
    assert list(Count(2) + Count(1)) == [0, 1, 0]
    with pytest.raises(AssertionError):
        ConcatDataset([Count(2)])


def test_random_split_ints_and_fractions():
    ds = Squares(10)
    a, b = random_split(ds, [3, 7], generator=minidl.Generator().manual_seed(0))
    assert (len(a), len(b)) == (3, 7)
    assert sorted(a.indices + b.indices) == list(range(10))
    a2, _ = random_split(ds, [3, 7], generator=minidl.Generator().manual_seed(0))
    assert a2.indices == a.indices
    parts = random_split(ds, [0.5, 0.3, 0.2], generator=minidl.Generator().manual_seed(1))
    assert [len(p) for p in parts] == [5, 3, 2]
    parts = random_split(Squares(11), [0.34, 0.33, 0.33])  # floors 3,3,3; the 2 left go round-robin
    assert [len(p) for p in parts] == [4, 4, 3]
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [3, 3])


# -- samplers --------------------------------------------------------------------------------------

def test_sequential_and_random_sampler():
    assert list(SequentialSampler(range(5))) == [0, 1, 2, 3, 4]
    perm = list(RandomSampler(range(7), generator=minidl.Generator().manual_seed(3)))
    assert sorted(perm) == list(range(7))
    assert perm == list(RandomSampler(range(7), generator=minidl.Generator().manual_seed(3)))
    more = list(RandomSampler(range(4), num_samples=10, generator=minidl.Generator().manual_seed(0)))
    assert len(more) == 10 and sorted(more[:4]) == sorted(more[4:8]) == [0, 1, 2, 3]  # whole permutations first
    rep = list(RandomSampler(range(3), replacement=True, num_samples=70))
    assert len(rep) == 70 and set(rep) <= {0, 1, 2}
    assert len(RandomSampler(range(5), replacement=True, num_samples=9)) == 9
    with pytest.raises(ValueError, match="num_samples"):
        RandomSampler(range(3), num_samples=0)
    with pytest.raises(TypeError, match="replacement"):
        RandomSampler(range(3), replacement=1)


def test_random_sampler_global_seed():
    minidl.manual_seed(5)
    a = list(RandomSampler(range(20)))
    minidl.manual_seed(5)
    assert list(RandomSampler(range(20))) == a


def test_random_sampler_is_lazy():
    """10**10 draws with replacement: the first few come at once and memory stays small."""
    sampler = RandomSampler(range(100), replacement=True, num_samples=10 ** 10,
                            generator=minidl.Generator().manual_seed(0))
    assert len(sampler) == 10 ** 10
    tracemalloc.start()
    it = iter(sampler)
    first = [next(it) for _ in range(100)]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert all(0 <= i < 100 for i in first)
    assert peak < 10 * 2 ** 20
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 4 * 2 ** 20  # KiB: < 4 GiB, nowhere near 80 GB
    loader = DataLoader(Squares(100), sampler=sampler, batch_size=8)
    assert len(loader) == math.ceil(10 ** 10 / 8)
    assert next(iter(loader)).shape == (8,)


def test_subset_random_and_weighted_sampler():
    idx = [5, 7, 11, 13]
    out = list(SubsetRandomSampler(idx, generator=minidl.Generator().manual_seed(0)))
    assert sorted(out) == idx and len(SubsetRandomSampler(idx)) == 4
    w = list(WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], 50, generator=minidl.Generator().manual_seed(0)))
    assert len(w) == 50 and set(w) <= {1, 3}
    no_rep = list(WeightedRandomSampler([1.0, 1.0, 1.0], 3, replacement=False))
    assert sorted(no_rep) == [0, 1, 2]


def test_batch_sampler():
    assert list(BatchSampler(range(7), 3, False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(BatchSampler(range(7), 3, True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(BatchSampler(range(7), 3, False)) == 3 and len(BatchSampler(range(7), 3, True)) == 2
    with pytest.raises(ValueError, match="batch_size"):
        BatchSampler(range(3), 0, False)
    with pytest.raises(ValueError, match="drop_last"):
        BatchSampler(range(3), 2, 0)


@pytest.mark.parametrize("n,replicas", [(10, 3), (9, 3), (2, 5), (7, 2), (1, 4)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_sampler_partition(n, replicas, shuffle):
    ds = range(n)
    parts = [list(DistributedSampler(ds, num_replicas=replicas, rank=r, shuffle=shuffle, seed=7))
             for r in range(replicas)]
    per = math.ceil(n / replicas)
    assert all(len(p) == per for p in parts)
    assert len(DistributedSampler(ds, num_replicas=replicas, rank=0)) == per
    everything = [i for p in parts for i in p]
    assert set(everything) == set(range(n))  # every index covered, padding repeats indices
    order = [parts[k % replicas][k // replicas] for k in range(per * replicas)]  # interleaved back
    base = order[:n]
    assert sorted(base) == list(range(n))
    if not shuffle:
        assert base == list(range(n))
    padding = order[n:]
    assert padding == (base * math.ceil(max(len(padding), 1) / n))[:len(padding)]
    # drop_last: trimmed to a multiple of num_replicas, no repeats
    dl_parts = [list(DistributedSampler(ds, num_replicas=replicas, rank=r, shuffle=shuffle, drop_last=True))
                for r in range(replicas)]
    flat = [i for p in dl_parts for i in p]
    assert len(flat) == (n // replicas) * replicas and len(set(flat)) == len(flat)


def test_distributed_sampler_epochs_and_errors():
    s = DistributedSampler(range(20), num_replicas=2, rank=1, seed=3)
    e0 = list(s)
    assert list(s) == e0
    s.set_epoch(1)
    e1 = list(s)
    assert e1 != e0 and s.epoch == 1
    s.set_epoch(0)
    assert list(s) == e0
    with pytest.raises(ValueError, match="Invalid rank"):
        DistributedSampler(range(4), num_replicas=2, rank=2)
    with pytest.raises(RuntimeError, match="process group"):
        DistributedSampler(range(4))


# -- collation -------------------------------------------------------------------------------------

def test_default_collate_types():
    assert default_collate([1.5, 2.0]).dtype == minidl.float64
    assert default_collate([1, 2]).dtype == minidl.int64
    assert default_collate([True, False]).dtype == minidl.bool
    assert default_collate([np.float32(1), np.float32(2)]).dtype == minidl.float32
    assert default_collate([np.zeros((2, 3)), np.ones((2, 3))]).shape == (2, 2, 3)
    assert default_collate([minidl.ones(3), minidl.zeros(3)]).tolist() == [[1, 1, 1], [0, 0, 0]]
    assert default_collate(["a", "b"]) == ["a", "b"]
    out = default_collate([(minidl.ones(2), 1, "x"), (minidl.zeros(2), 2, "y")])
    assert isinstance(out, list) and out[0].shape == (2, 2) and out[1].tolist() == [1, 2] and out[2] == ("x", "y")
    d = default_collate([{"a": 1.0, "b": [1, 2]}, {"a": 2.0, "b": [3, 4]}])
    assert d["a"].tolist() == [1.0, 2.0] and [t.tolist() for t in d["b"]] == [[1, 3], [2, 4]]
    P = namedtuple("P", "x y")
    p = default_collate([P(1, 2.0), P(3, 4.0)])
    assert isinstance(p, P) and p.x.tolist() == [1, 3]
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [1]])
    with pytest.raises(TypeError):
        default_collate([object(), object()])
    with pytest.raises(TypeError):
        default_collate([np.array(["a"]), np.array(["b"])])


def test_default_convert():
    out = default_convert({"a": np.arange(3), "b": 1.5, "c": (np.ones(2), "s")})
    assert isinstance(out["a"], minidl.Tensor) and out["b"] == 1.5 and isinstance(out["c"][0], minidl.Tensor)
    assert out["c"][1] == "s"


# -- DataLoader, one process -----------------------------------------------------------------------

def test_dataloader_batches_and_len():
    ds = TensorDataset(minidl.arange(10).float(), minidl.arange(10))
    loader = DataLoader(ds, batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and len(batches) == 3
    assert batches[0][0].shape == (4,) and batches[2][1].tolist() == [8, 9]
    assert len(DataLoader(ds, batch_size=4, drop_last=True)) == 2
    assert [b[1].tolist() for b in DataLoader(ds, batch_size=4, drop_last=True)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(DataLoader(Squares(5))) == 5
    assert [b.tolist() for b in DataLoader(Squares(3))] == [[0], [1], [4]]


def test_dataloader_shuffle_reproducible():
    ds = Squares(30)
    run = lambda: [b.tolist() for b in DataLoader(ds, batch_size=7, shuffle=True,
                                                  generator=minidl.Generator().manual_seed(42))]
    a = run()
    assert a == run()
    assert sorted(v for b in a for v in b) == sorted(i * i for i in range(30))
    minidl.manual_seed(1)
    g1 = [b.tolist() for b in DataLoader(ds, batch_size=7, shuffle=True)]
    minidl.manual_seed(1)
    assert [b.tolist() for b in DataLoader(ds, batch_size=7, shuffle=True)] == g1
    loader = DataLoader(ds, batch_size=30, shuffle=True, generator=minidl.Generator().manual_seed(0))
    assert next(iter(loader)).tolist() != next(iter(loader)).tolist()  # each epoch its own order


def test_dataloader_no_batching_and_batch_sampler_and_collate_fn():
    assert list(DataLoader(Squares(3), batch_size=None)) == [0, 1, 4]
    loader = DataLoader(Squares(6), batch_sampler=[[0, 1], [5], [2, 3, 4]])
    assert [b.tolist() for b in loader] == [[0, 1], [25], [4, 9, 16]] and len(loader) == 3
    assert list(DataLoader(Squares(4), batch_size=2, collate_fn=sum)) == [1, 13]
    arr = next(iter(DataLoader([np.ones(2)], batch_size=None)))
    assert isinstance(arr, minidl.Tensor)
    assert get_worker_info() is None


def test_dataloader_iterable_dataset():
    assert [b.tolist() for b in DataLoader(Count(7), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.tolist() for b in DataLoader(Count(7), batch_size=3, drop_last=True)] == [[0, 1, 2], [3, 4, 5]]
    assert list(DataLoader(Count(3), batch_size=None)) == [0, 1, 2]
    assert len(DataLoader(Count(7), batch_size=3)) == 3 and len(DataLoader(Count(7), batch_size=3, drop_last=True)) == 2


def test_dataloader_argument_errors():
    ds = Squares(4)
    bs = [[0, 1]]
    for kwargs in (dict(batch_size=2), dict(shuffle=True), dict(sampler=[0]), dict(drop_last=True)):
        with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
            DataLoader(ds, batch_sampler=bs, **kwargs)
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        DataLoader(ds, sampler=[0, 1], shuffle=True)
    with pytest.raises(ValueError, match="mutually exclusive with drop_last"):
        DataLoader(ds, batch_size=None, drop_last=True)
    with pytest.raises(ValueError, match="expected unspecified shuffle"):
        DataLoader(Count(3), shuffle=True)
    with pytest.raises(ValueError, match="expected unspecified sampler"):
        DataLoader(Count(3), sampler=[0])
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(ds, num_workers=-1)
    with pytest.raises(ValueError, match="timeout"):
        DataLoader(ds, timeout=-1)
    with pytest.raises(ValueError, match="prefetch_factor"):
        DataLoader(ds, prefetch_factor=2)
    with pytest.raises(ValueError, match="persistent_workers"):
        DataLoader(ds, persistent_workers=True)
    loader = DataLoader(ds)
    with pytest.raises(ValueError, match="should not be set"):
        loader.batch_size = 3
