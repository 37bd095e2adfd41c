"""Run a distributed function on N simulated ranks (threads of this process), no mpiexec needed:

    results = minidl.dist.sim.run(4, fn, *args)   # fn(rank, *args) on each rank

Each rank's thread has its own default process group (backend "sim"), so fn calls
minidl.dist collectives as under mpiexec. The first exception raised by any rank is re-raised
here; the ranks still waiting on it fail instead of hanging. ``hosts`` fakes a host name per
rank (to exercise the hierarchical all-reduce); other keywords go to init_process_group. Each rank
draws from a default CPU generator of its own, starting where the caller's stands (as forked processes do).
"""
from __future__ import annotations

import threading

from ..ops import random
from .communicators.sim import SimWorld
from .state import destroy_process_group, init_process_group


_rank = threading.local()   # (the running rank's exit hooks)


def at_rank_exit(hook) -> None:
    """Call ``hook()`` when this simulated rank's function ends, as ``atexit`` does for a process."""
    getattr(_rank, "hooks", []).append(hook)   # (a rank started by hand, not by run, has none)


def run(world_size: int, fn, *args, hosts=None, **init_options):
    world = SimWorld(world_size, hosts)
    results = [None] * world_size
    errors = []
    lock = threading.Lock()
    seed, offset = (int(v) for v in random.cpu_default().get_state().numpy().view("<u8"))

    def rank_main(rank):
        _rank.hooks = []
        random.own_default(random.Generator.at("cpu", seed, offset))
        try:
            init_process_group("sim", world_size=world_size, rank=rank, store=world, **init_options)
            results[rank] = fn(rank, *args)
        except BaseException as e:
            with lock:
                errors.append((rank, e))
            world.leave(rank, "failed")
        finally:
            for hook in reversed(_rank.hooks):
                hook()
            try:
                destroy_process_group()  # lets pending collectives finish (or fail)
            finally:
                world.leave(rank, "exited")

    threads = [threading.Thread(target=rank_main, args=(r,), name=f"sim rank {r}") for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        rank, error = errors[0]
        error.add_note(f"(raised on sim rank {rank} of {world_size})")
        raise error
    return results
