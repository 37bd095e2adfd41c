"""Python's :mod:`multiprocessing`, with tensors sent between processes by shared memory.

A tensor whose storage was moved to shared memory (``share_memory_()``) travels to another process
(Process arguments under spawn, queues, pipes) as a handle to that memory, not a copy, so several
processes can update one model's parameters (Hogwild training); under fork the children inherit the
memory anyway. Other tensors are copied, as any pickled object is. ``spawn`` starts the processes of
one job and joins them as one (``spawn.py``).
"""
from multiprocessing import *  # noqa: F401,F403
from multiprocessing import reduction

from .. import UntypedStorage
from .spawn import ProcessContext, ProcessExitedException, ProcessRaisedException, spawn, start_processes  # noqa: F401


def _reduce_storage(storage):
    if storage.shared is None:
        return storage.__reduce__()
    return (UntypedStorage.from_shared, (storage.shared, str(storage.device), storage.writable))


reduction.ForkingPickler.register(UntypedStorage, _reduce_storage)
