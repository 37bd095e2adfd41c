"""DataLoader with worker processes: order, seeds, get_worker_info, errors, iterable sharding,
persistent workers, timeouts. Kept small: each loader starts two processes."""
import os
import time

import numpy as np
import pytest

import minidl
from minidl.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info


class Slow(Dataset):
    """Item i is (i, pid, worker id, worker seed); odd items are slower, so workers finish out of order."""

    def __init__(self, n, fail_at=None):
        self.n, self.fail_at = n, fail_at

    def __getitem__(self, i):
        if i == self.fail_at:
            raise ValueError(f"bad item {i}")
        if i % 2:
            time.sleep(0.01)
        info = get_worker_info()
        return {"i": i, "pid": os.getpid(), "wid": info.id, "seed": info.seed, "nw": info.num_workers,
                "r": float(minidl.rand(1).item()), "np": float(np.random.rand())}

    def __len__(self):
        return self.n


class Sharded(IterableDataset):
    """Each worker yields its own share of range(n), as in PyTorch's docs."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


class Dies(Dataset):
    def __getitem__(self, i):
        os._exit(3)

    def __len__(self):
        return 4


class Sleeps(Dataset):
    def __getitem__(self, i):
        time.sleep(1.0)
        return i

    def __len__(self):
        return 2


def test_two_workers_preserve_order_and_seed_each_worker():
    loader = DataLoader(Slow(12), batch_size=2, num_workers=2, generator=minidl.Generator().manual_seed(0))
    batches = list(loader)
    assert len(batches) == len(loader) == 6
    assert [b["i"].tolist() for b in batches] == [[2 * k, 2 * k + 1] for k in range(6)]
    assert all(b["nw"].tolist() == [2, 2] for b in batches)
    wids = [b["wid"][0].item() for b in batches]
    assert wids == [0, 1, 0, 1, 0, 1]  # round-robin
    pids = {b["pid"][0].item() for b in batches}
    assert len(pids) == 2 and os.getpid() not in pids
    seeds = {w: b["seed"][0].item() for w, b in zip(wids, batches)}
    assert seeds[1] == seeds[0] + 1  # base seed + worker id
    # the same loader generator gives the same base seed, hence the same per-worker random streams
    again = list(DataLoader(Slow(12), batch_size=2, num_workers=2, generator=minidl.Generator().manual_seed(0)))
    assert [b["r"].tolist() for b in again] == [b["r"].tolist() for b in batches]
    assert [b["np"].tolist() for b in again] == [b["np"].tolist() for b in batches]
    assert batches[0]["r"].tolist() != batches[1]["r"].tolist()  # the two workers differ


def test_worker_exception_is_reraised_with_its_traceback():
    loader = DataLoader(Slow(8, fail_at=5), batch_size=2, num_workers=2)
    it = iter(loader)
    assert next(it)["i"].tolist() == [0, 1]
    assert next(it)["i"].tolist() == [2, 3]
    with pytest.raises(ValueError) as exc:
        next(it)
    msg = str(exc.value)
    assert "bad item 5" in msg and "in DataLoader worker process 0" in msg and "Traceback" in msg
    it._shutdown_workers()
    assert not any(w.is_alive() for w in it._workers)


def test_worker_init_fn_error_and_shuffle():
    def init(worker_id):
        raise KeyError(f"init failed {worker_id}")
    with pytest.raises(KeyError, match="init failed"):
        list(DataLoader(Slow(4), num_workers=2, worker_init_fn=init))
    out = [b.item() for b in DataLoader(list(range(10)), shuffle=True, num_workers=2,
                                        generator=minidl.Generator().manual_seed(3))]
    same = [b.item() for b in DataLoader(list(range(10)), shuffle=True, num_workers=0,
                                         generator=minidl.Generator().manual_seed(3))]
    assert out == same and sorted(out) == list(range(10))


def test_iterable_dataset_in_workers():
    batches = [b.tolist() for b in DataLoader(Sharded(9), batch_size=2, num_workers=2)]
    # worker 0 has 0,2,4,6,8 and worker 1 has 1,3,5,7; batches alternate between them
    assert batches == [[0, 2], [1, 3], [4, 6], [5, 7], [8]]
    assert list(DataLoader(Sharded(5), batch_size=None, num_workers=2)) == [0, 1, 2, 3, 4]


def test_persistent_workers_and_early_exit():
    loader = DataLoader(Slow(6), batch_size=2, num_workers=2, persistent_workers=True)
    first = [b["i"].tolist() for b in loader]
    pids = {w.pid for w in loader._iterator._workers}
    it = iter(loader)
    next(it)  # abandon this epoch midway
    second = [b["i"].tolist() for b in loader]
    assert first == second == [[0, 1], [2, 3], [4, 5]]
    assert {w.pid for w in loader._iterator._workers} == pids
    workers = loader._iterator._workers
    loader._iterator._shutdown_workers()
    assert not any(w.is_alive() for w in workers)
    # an iterator dropped midway stops its workers when collected
    it = iter(DataLoader(Slow(20), num_workers=2))
    next(it)
    workers = it._workers
    del it
    import gc
    gc.collect()
    assert not any(w.is_alive() for w in workers)


def test_dead_worker_and_timeout_raise():
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        list(DataLoader(Dies(), num_workers=2))
    t = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out after 0.3 seconds"):
        list(DataLoader(Sleeps(), num_workers=2, timeout=0.3))
    assert time.monotonic() - t < 4


def test_spawn_context():
    from minidl.utils.data import TensorDataset
    ds = TensorDataset(minidl.arange(10), minidl.arange(10) * 3)
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context="spawn")
    assert [b[1].tolist() for b in loader] == [[0, 3, 6, 9], [12, 15, 18, 21], [24, 27]]
    with pytest.raises(ValueError, match="multiprocessing_context can only be used"):
        DataLoader(ds, multiprocessing_context="spawn")
