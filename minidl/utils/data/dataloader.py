"""DataLoader, as in ``torch.utils.data.dataloader``: batches from a dataset, in this process or in
worker processes.

With ``num_workers > 0`` each worker is a process (``fork`` where available, else ``spawn``, or the
``multiprocessing_context`` given) with its own index queue; all send ``(task index, batch)`` to one
result queue, and the main process hands out at most ``prefetch_factor * num_workers`` tasks at a time,
round-robin, and returns the batches in task order. A worker's exception comes back wrapped with its
traceback and is re-raised here; a worker that dies is detected while waiting; workers are stopped
and joined when the iteration ends, or when the iterator is garbage collected.
"""
from __future__ import annotations

import atexit
import itertools
import multiprocessing as mp
import os
import queue
import random
import sys
import time
import traceback
import warnings
import weakref

import numpy as np

import minidl

from ._collate import default_collate, default_convert
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler


__all__ = ["DataLoader", "WorkerInfo", "default_collate", "default_convert", "get_worker_info"]

MP_STATUS_CHECK_INTERVAL = 0.5  # seconds between checks that the workers (or the parent) are alive
_JOIN_TIMEOUT = 5.0  # seconds the workers get to exit once told to


# -- worker-side helpers ---------------------------------------------------------------------------

class WorkerInfo:
    """What ``get_worker_info()`` returns inside a worker: ``id``, ``num_workers``, ``seed``, ``dataset``."""
    __initialized = False

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)
        self.__keys = tuple(kwargs.keys())
        self.__initialized = True

    def __setattr__(self, key, val):
        if self.__initialized:
            raise RuntimeError(f"Cannot assign attributes to {self.__class__.__name__} objects")
        return super().__setattr__(key, val)

    def __repr__(self):
        items = ", ".join(f"{k}={getattr(self, k)}" for k in self.__keys)
        return f"{self.__class__.__name__}({items})"


_worker_info = None


def get_worker_info():
    """Inside a DataLoader worker process, its ``WorkerInfo``; in the main process, None."""
    return _worker_info


class ExceptionWrapper:
    """An exception with its traceback as text, to be pickled across processes and re-raised."""

    def __init__(self, exc_info=None, where="in background"):
        if exc_info is None:
            exc_info = sys.exc_info()
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            msg = KeyErrorMessage(msg)
        elif getattr(self.exc_type, "message", None):
            raise self.exc_type(message=msg)
        try:
            exception = self.exc_type(msg)
        except Exception:
            raise RuntimeError(msg) from None
        raise exception


class KeyErrorMessage(str):
    """A str whose repr is itself, so a re-raised KeyError shows the traceback readably."""

    def __repr__(self):
        return self


class _DatasetKind:
    Map = 0
    Iterable = 1

    @staticmethod
    def create_fetcher(kind, dataset, auto_collation, collate_fn, drop_last):
        if kind == _DatasetKind.Map:
            return _MapDatasetFetcher(dataset, auto_collation, collate_fn, drop_last)
        return _IterableDatasetFetcher(dataset, auto_collation, collate_fn, drop_last)


class _MapDatasetFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset, self.auto_collation, self.collate_fn, self.drop_last = dataset, auto_collation, collate_fn, drop_last

    def fetch(self, possibly_batched_index):
        if self.auto_collation:
            if callable(getattr(self.dataset, "__getitems__", None)):
                data = self.dataset.__getitems__(possibly_batched_index)
            else:
                data = [self.dataset[idx] for idx in possibly_batched_index]
        else:
            data = self.dataset[possibly_batched_index]
        return self.collate_fn(data)


class _IterableDatasetFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset, self.auto_collation, self.collate_fn, self.drop_last = dataset, auto_collation, collate_fn, drop_last
        self.dataset_iter = iter(dataset)
        self.ended = False

    def fetch(self, possibly_batched_index):
        if self.ended:
            raise StopIteration
        if self.auto_collation:
            data = []
            for _ in possibly_batched_index:
                try:
                    data.append(next(self.dataset_iter))
                except StopIteration:
                    self.ended = True
                    break
            if len(data) == 0 or (self.drop_last and len(data) < len(possibly_batched_index)):
                raise StopIteration
        else:
            data = next(self.dataset_iter)
        return self.collate_fn(data)


class _InfiniteConstantSampler(Sampler):
    """The sampler of an iterable dataset: None forever (the dataset decides when to stop)."""

    def __iter__(self):
        while True:
            yield None


class _IterableDatasetStopIteration:
    def __init__(self, worker_id):
        self.worker_id = worker_id


class _ResumeIteration:
    """Sent to persistent workers at the start of a new epoch."""


def _seed_worker(seed, worker_id, base_seed):
    random.seed(seed)
    minidl.manual_seed(seed)
    np.random.seed(np.random.SeedSequence([worker_id, base_seed]).generate_state(4))


def _worker_loop(dataset_kind, dataset, index_queue, data_queue, done_event, auto_collation, collate_fn,
                 drop_last, base_seed, init_fn, worker_id, num_workers):
    global _worker_info
    try:
        parent = os.getppid()
        try:
            minidl.set_num_threads(1)
        except Exception:
            pass
        seed = base_seed + worker_id
        _seed_worker(seed, worker_id, base_seed)
        _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
        init_exception = None
        fetcher = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = _DatasetKind.create_fetcher(dataset_kind, dataset, auto_collation, collate_fn, drop_last)
        except Exception:
            init_exception = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
        iteration_end = False
        while True:
            try:
                r = index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)
            except queue.Empty:
                if os.getppid() != parent:  # the main process is gone
                    break
                continue
            if isinstance(r, _ResumeIteration):
                data_queue.put((r, None))
                iteration_end = False
                try:
                    fetcher = _DatasetKind.create_fetcher(dataset_kind, dataset, auto_collation, collate_fn,
                                                          drop_last)
                except Exception:
                    init_exception = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
                continue
            if r is None:  # shutdown
                break
            if done_event.is_set() or iteration_end:
                continue
            idx, index = r
            if init_exception is not None:
                data, init_exception = init_exception, None
            else:
                try:
                    data = fetcher.fetch(index)
                except Exception as e:
                    if isinstance(e, StopIteration) and dataset_kind == _DatasetKind.Iterable:
                        data = _IterableDatasetStopIteration(worker_id)
                        iteration_end = True
                    else:
                        data = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
            data_queue.put((idx, data))
            del data, idx, index, r
    except KeyboardInterrupt:
        pass
    if done_event.is_set():
        data_queue.cancel_join_thread()
        data_queue.close()


# -- the DataLoader --------------------------------------------------------------------------------

class DataLoader:
    """Iterate over ``dataset`` in batches (see the module docstring and PyTorch's documentation; the
    arguments, defaults and errors are the same)."""

    __initialized = False

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                             "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory  # accepted; batches stay in ordinary host memory (see Tensor.pin_memory)
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.in_order = in_order  # batches always come back in order (allowed either way)

        if isinstance(dataset, IterableDataset):
            self._dataset_kind = _DatasetKind.Iterable
            if isinstance(shuffle, bool) and shuffle:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, "
                                 f"but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler option, "
                                 f"but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified batch_sampler option, "
                                 f"but got batch_sampler={batch_sampler}")
        else:
            shuffle = bool(shuffle)
            self._dataset_kind = _DatasetKind.Map

        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")

        if sampler is None:
            if self._dataset_kind == _DatasetKind.Iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self.multiprocessing_context = multiprocessing_context
        self._iterator = None
        self.__initialized = True

    @property
    def multiprocessing_context(self):
        return self.__multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, context):
        if context is not None:
            if self.num_workers <= 0:
                raise ValueError("multiprocessing_context can only be used with multi-process loading "
                                 f"(num_workers > 0), but got num_workers={self.num_workers}")
            if isinstance(context, str):
                valid = mp.get_all_start_methods()
                if context not in valid:
                    raise ValueError("multiprocessing_context option should specify a valid start method in "
                                     f"{valid!r}, but got multiprocessing_context={context!r}")
                context = mp.get_context(context)
            elif not isinstance(context, mp.context.BaseContext):
                raise TypeError("multiprocessing_context option should be a valid context object or a string "
                                f"specifying the start method, but got multiprocessing_context={context}")
        self.__multiprocessing_context = context

    def __setattr__(self, attr, val):
        if self.__initialized and attr in ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                                           "persistent_workers"):
            raise ValueError(f"{attr} attribute should not be set after {self.__class__.__name__} is initialized")
        super().__setattr__(attr, val)

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def _get_shared_seed(self):
        return int(minidl.random.numpy_generator(self.generator).integers(0, 2 ** 63 - 1))

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        return _MultiProcessingDataLoaderIter(self)

    def __iter__(self):
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None:
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    def __len__(self):
        if self._dataset_kind == _DatasetKind.Iterable:
            length = self._IterableDataset_len_called = len(self.dataset)
            if self.batch_size is not None:
                length = length // self.batch_size if self.drop_last else -(-length // self.batch_size)
            return length
        return len(self._index_sampler)


class _BaseDataLoaderIter:
    def __init__(self, loader):
        self._dataset = loader.dataset
        self._shared_seed = None
        self._dataset_kind = loader._dataset_kind
        self._IterableDataset_len_called = getattr(loader, "_IterableDataset_len_called", None)
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        self._prefetch_factor = loader.prefetch_factor
        self._pin_memory = loader.pin_memory
        self._timeout = loader.timeout
        self._collate_fn = loader.collate_fn
        self._persistent_workers = loader.persistent_workers
        self._sampler_iter = iter(self._index_sampler)
        self._base_seed = loader._get_shared_seed()
        self._num_yielded = 0

    def __iter__(self):
        return self

    def _reset(self, loader, first_iter=False):
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0
        self._IterableDataset_len_called = getattr(loader, "_IterableDataset_len_called", None)

    def _next_index(self):
        return next(self._sampler_iter)

    def _next_data(self):
        raise NotImplementedError

    def __next__(self):
        data = self._next_data()
        self._num_yielded += 1
        if (self._dataset_kind == _DatasetKind.Iterable and self._IterableDataset_len_called is not None
                and self._num_yielded > self._IterableDataset_len_called):
            warnings.warn(f"Length of IterableDataset {self._dataset} was reported to be "
                          f"{self._IterableDataset_len_called} (when accessing len(dataloader)), but "
                          f"{self._num_yielded} samples have been fetched. ")
        return data

    def __len__(self):
        return len(self._index_sampler)


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    def __init__(self, loader):
        super().__init__(loader)
        self._dataset_fetcher = _DatasetKind.create_fetcher(self._dataset_kind, self._dataset, self._auto_collation,
                                                            self._collate_fn, self._drop_last)

    def _next_data(self):
        index = self._next_index()  # may raise StopIteration
        return self._dataset_fetcher.fetch(index)  # may raise StopIteration


_live_iterators = weakref.WeakSet()  # multiprocess iterators whose workers may still run


@atexit.register
def _shutdown_all_workers():
    for it in list(_live_iterators):
        it._shutdown_workers()


def _default_context():
    return mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
    def __init__(self, loader):
        super().__init__(loader)
        self._shutdown = True  # until the workers exist
        ctx = loader.multiprocessing_context or _default_context()
        self._worker_init_fn = loader.worker_init_fn
        self._worker_result_queue = ctx.Queue()
        self._workers_done_event = ctx.Event()
        self._index_queues, self._workers = [], []
        try:
            for i in range(self._num_workers):
                index_queue = ctx.Queue()
                index_queue.cancel_join_thread()
                w = ctx.Process(target=_worker_loop,
                                args=(self._dataset_kind, self._dataset, index_queue, self._worker_result_queue,
                                      self._workers_done_event, self._auto_collation, self._collate_fn,
                                      self._drop_last, self._base_seed, self._worker_init_fn, i, self._num_workers),
                                daemon=True)
                w.start()
                self._index_queues.append(index_queue)
                self._workers.append(w)
        finally:
            self._shutdown = False
            _live_iterators.add(self)
        self._reset(loader, first_iter=True)

    def _reset(self, loader, first_iter=False):
        super()._reset(loader, first_iter)
        self._send_idx = 0
        self._rcvd_idx = 0
        self._task_info = {}
        self._tasks_outstanding = 0
        self._workers_status = [True] * self._num_workers
        self._worker_queue_idx_cycle = itertools.cycle(range(self._num_workers))
        if not first_iter:  # persistent workers: drain the last epoch, restart the workers' iterations
            for q in self._index_queues:
                q.put(_ResumeIteration())
            remaining = self._num_workers
            while remaining > 0:
                idx, _ = self._get_data()
                if isinstance(idx, _ResumeIteration):
                    remaining -= 1
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _try_get_data(self, timeout=MP_STATUS_CHECK_INTERVAL):
        try:
            return True, self._worker_result_queue.get(timeout=timeout)
        except queue.Empty:
            failed = [w for i, w in enumerate(self._workers) if self._workers_status[i] and not w.is_alive()]
            if failed:
                pids = ", ".join(str(w.pid) for w in failed)
                self._shutdown_workers()
                raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly") from None
            return False, None

    def _get_data(self):
        if self._timeout > 0:
            deadline = time.monotonic() + self._timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
                ok, data = self._try_get_data(min(left, MP_STATUS_CHECK_INTERVAL))
                if ok:
                    return data
        while True:
            ok, data = self._try_get_data()
            if ok:
                return data

    def _next_data(self):
        if self._shutdown:  # the workers are gone (the epoch ended, or a worker died)
            raise StopIteration
        while True:
            while self._rcvd_idx < self._send_idx:
                info = self._task_info[self._rcvd_idx]
                if len(info) == 2 or self._workers_status[info[0]]:
                    break
                del self._task_info[self._rcvd_idx]  # its worker ran out of data: skip
                self._rcvd_idx += 1
            else:
                if not self._persistent_workers:
                    self._shutdown_workers()
                raise StopIteration
            if len(self._task_info[self._rcvd_idx]) == 2:
                data = self._task_info.pop(self._rcvd_idx)[1]
                return self._process_data(data)
            idx, data = self._get_data()
            self._tasks_outstanding -= 1
            if isinstance(data, _IterableDatasetStopIteration):
                if self._persistent_workers:
                    self._workers_status[data.worker_id] = False
                else:
                    self._mark_worker_as_unavailable(data.worker_id)
                self._try_put_index()
                continue
            if idx != self._rcvd_idx:
                self._task_info[idx] += (data,)
            else:
                del self._task_info[idx]
                return self._process_data(data)

    def _process_data(self, data):
        self._rcvd_idx += 1
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            data.reraise()
        return data

    def _try_put_index(self):
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):
            worker_queue_idx = next(self._worker_queue_idx_cycle)
            if self._workers_status[worker_queue_idx]:
                break
        else:
            return  # no active worker left
        self._index_queues[worker_queue_idx].put((self._send_idx, index))
        self._task_info[self._send_idx] = (worker_queue_idx,)
        self._tasks_outstanding += 1
        self._send_idx += 1

    def _mark_worker_as_unavailable(self, worker_id):
        self._index_queues[worker_id].put(None)
        self._workers_status[worker_id] = False

    def _shutdown_workers(self):
        if getattr(self, "_shutdown", True):
            return
        self._shutdown = True
        try:
            self._workers_done_event.set()
            for q in self._index_queues:
                try:
                    q.put(None)
                except Exception:
                    pass
            deadline = time.monotonic() + _JOIN_TIMEOUT  # one budget for all: a worker stuck in a slow
            for w in self._workers:                     # __getitem__ is terminated once it runs out
                w.join(timeout=max(deadline - time.monotonic(), 0.0))
            for w in self._workers:
                if w.is_alive():
                    w.terminate()
                    w.join(timeout=_JOIN_TIMEOUT)
            for q in self._index_queues:
                q.cancel_join_thread()
                q.close()
            self._worker_result_queue.cancel_join_thread()
            self._worker_result_queue.close()
            self._index_queues, self._worker_result_queue, self._workers_done_event = [], None, None
        except Exception:
            pass

    def __del__(self):
        self._shutdown_workers()


