"""minidl.utils.data against torch.utils.data: collation types/shapes/dtypes, sampler and loader
structure (lengths, partitions, padding) and error behaviour. RNG streams differ, so shuffled orders
are compared as structures, not values."""
from collections import namedtuple

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.utils.data as tud

import minidl
import minidl.utils.data as mud

P = namedtuple("P", "a b")


def _structure(x):
    """Type/shape/dtype skeleton of a collated batch, the same words for torch and minidl."""
    if isinstance(x, (torch.Tensor, minidl.Tensor)):
        return ("tensor", tuple(x.shape), str(x.dtype).split(".")[-1], x.tolist())
    if isinstance(x, dict):
        return ("dict", {k: _structure(v) for k, v in x.items()})
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return (type(x).__name__, [_structure(v) for v in x])
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [_structure(v) for v in x])
    return (type(x).__name__, x)


def _to(lib, sample):
    """The same sample built with torch or minidl tensors."""
    if isinstance(sample, dict):
        return {k: _to(lib, v) for k, v in sample.items()}
    if isinstance(sample, tuple) and hasattr(sample, "_fields"):
        return type(sample)(*(_to(lib, v) for v in sample))
    if isinstance(sample, (list, tuple)):
        return type(sample)(_to(lib, v) for v in sample)
    if isinstance(sample, _T):
        return lib.tensor(sample.value, dtype=getattr(lib, sample.dtype))
    return sample


class _T:
    def __init__(self, value, dtype):
        self.value, self.dtype = value, dtype


BATCHES = [
    [1, 2, 3],
    [1.5, 2.0],
    [True, False],
    ["a", "b"],
    [b"x", b"y"],
    [np.float32(1.0), np.float32(2.5)],
    [np.float64(1.0), np.float64(2.5)],
    [np.int32(3), np.int32(4)],
    [np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((2, 3), np.int32)],
    [np.zeros(3), np.ones(3)],
    [np.ones(2, np.float32), np.zeros(2, np.float32)],
    [np.array(True), np.array(False)],
    [_T([1.0, 2.0], "float32"), _T([3.0, 4.0], "float32")],
    [_T([[1, 2]], "int64"), _T([[3, 4]], "int64")],
    [_T(2.0, "float64"), _T(3.0, "float64")],
    [(_T([1.0], "float32"), 1, "s"), (_T([2.0], "float32"), 2, "t")],
    [[1, 2.5], [3, 4.5]],
    [{"x": 1, "y": [1.0, _T([1], "int64")]}, {"x": 2, "y": [2.0, _T([2], "int64")]}],
    [P(1, 2.0), P(3, 4.0)],
]


@pytest.mark.parametrize("batch", BATCHES, ids=range(len(BATCHES)))
def test_default_collate_matches_torch(batch):
    expected = _structure(tud.default_collate(_to(torch, batch)))
    assert _structure(mud.default_collate(_to(minidl, batch))) == expected


@pytest.mark.parametrize("data", [np.arange(3), {"a": np.ones(2), "b": 1.5, "c": "s"}, (np.zeros(2), 3), [1, 2],
                                  3.5, "str"])
def test_default_convert_matches_torch(data):
    assert _structure(mud.default_convert(data)) == _structure(tud.default_convert(data))


def test_collate_errors_match_torch():
    for batch in ([[1, 2], [1]], [object(), object()], [np.array(["a"]), np.array(["b"])]):
        with pytest.raises(Exception) as t_err:
            tud.default_collate(batch)
        with pytest.raises(Exception) as m_err:
            mud.default_collate(batch)
        assert type(m_err.value) is type(t_err.value)


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True), (2, 5, False), (9, 3, True),
                                                  (7, 4, False), (7, 4, True)])
def test_distributed_sampler_structure_matches_torch(n, replicas, drop_last):
    for shuffle in (False, True):
        t = [list(tud.DistributedSampler(range(n), replicas, r, shuffle=shuffle, drop_last=drop_last))
             for r in range(replicas)]
        m = [list(mud.DistributedSampler(range(n), replicas, r, shuffle=shuffle, drop_last=drop_last))
             for r in range(replicas)]
        assert [len(p) for p in m] == [len(p) for p in t]
        assert len(mud.DistributedSampler(range(n), replicas, 0, drop_last=drop_last)) == \
            len(tud.DistributedSampler(range(n), replicas, 0, drop_last=drop_last))
        if not shuffle:
            assert m == t  # without shuffling the orders are deterministic and must agree
        else:
            # the same multiset structure: each index appears as often as in torch's (up to relabelling)
            count = lambda parts: sorted(np.bincount([i for p in parts for i in p], minlength=n).tolist())
            assert count(m) == count(t)


@pytest.mark.parametrize("kwargs", [dict(batch_size=3), dict(batch_size=3, drop_last=True), dict(batch_size=None),
                                    dict(batch_size=4, shuffle=True), dict(batch_size=1)])
def test_dataloader_lengths_and_batch_shapes_match_torch(kwargs):
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10)
    t_loader = tud.DataLoader(tud.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), **kwargs)
    m_loader = mud.DataLoader(mud.TensorDataset(minidl.from_numpy(x), minidl.from_numpy(y)), **kwargs)
    assert len(m_loader) == len(t_loader)
    t_batches, m_batches = list(t_loader), list(m_loader)
    assert [[tuple(v.shape) for v in b] for b in m_batches] == [[tuple(v.shape) for v in b] for b in t_batches]
    assert [[str(v.dtype).split(".")[-1] for v in b] for b in m_batches] == \
        [[str(v.dtype).split(".")[-1] for v in b] for b in t_batches]
    if not kwargs.get("shuffle"):
        assert [[v.tolist() for v in b] for b in m_batches] == [[v.tolist() for v in b] for b in t_batches]


def test_random_split_and_samplers_match_torch_lengths():
    for lengths, n in (([3, 7], 10), ([0.5, 0.5], 11), ([0.34, 0.33, 0.33], 11), ([0.1, 0.2, 0.7], 11)):
        t = [len(s) for s in tud.random_split(range(n), lengths)]
        assert [len(s) for s in mud.random_split(range(n), lengths)] == t
    for num in (3, 10, 25):
        assert len(list(mud.RandomSampler(range(7), num_samples=num))) == \
            len(list(tud.RandomSampler(range(7), num_samples=num)))
    assert list(mud.BatchSampler(range(10), 4, False)) == list(tud.BatchSampler(range(10), 4, False))
    assert list(mud.BatchSampler(range(10), 4, True)) == list(tud.BatchSampler(range(10), 4, True))


def test_dataloader_argument_errors_match_torch():
    bad = [dict(batch_sampler=[[0]], batch_size=2), dict(batch_sampler=[[0]], shuffle=True),
           dict(batch_sampler=[[0]], drop_last=True), dict(sampler=[0], shuffle=True),
           dict(batch_size=None, drop_last=True), dict(num_workers=-1), dict(prefetch_factor=2),
           dict(persistent_workers=True), dict(timeout=-1)]
    for kwargs in bad:
        with pytest.raises(ValueError) as t_err:
            tud.DataLoader(list(range(4)), **kwargs)
        with pytest.raises(ValueError) as m_err:
            mud.DataLoader(list(range(4)), **kwargs)
        assert str(m_err.value) == str(t_err.value)
