"""The default process group and subgroups: init_process_group, new_group, destroy_process_group,
get_rank, get_world_size.

Under MPI a process is one rank, so the default group belongs to the process. Under the sim
backend each rank is a thread, so the default group is per thread (set by ``init_process_group``
on that thread).
"""
from __future__ import annotations

import dataclasses
import os
import threading
from datetime import timedelta

from . import communicators
from .group import ProcessGroup, _seconds, config_from
from .launch import fit_threads_to_cores, launched_by_mpi


class GroupMember:
    WORLD = None  # "the default group", as in torch.distributed
    NON_GROUP_MEMBER = object()  # what new_group returns to ranks outside the group


_thread = threading.local()
_process = {}  # "default": the process's default group, "subgroups": groups made by new_group


def _state():
    mine = _thread.__dict__
    return mine if "default" in mine else _process


def _default():
    return _thread.__dict__.get("default") or _process.get("default")


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return _default() is not None


def resolve(group, what: str):
    """The group a call means (the default one for None); None for a rank outside the group,
    on which calls do nothing (as in torch.distributed)."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return None
    found = _default() if group is None else group
    if found is None:
        raise RuntimeError(f"{what}: the default process group is not initialized; call "
                           f"minidl.dist.init_process_group() first")
    if not isinstance(found, ProcessGroup):
        raise TypeError(f"{what}: group must be a ProcessGroup from new_group(), got {type(found).__name__}")
    return found


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, *, algorithm=None, chunk_elements=None,
                       small_message_bytes=None, segment_bytes=None, stall_seconds=None):
    """Start this rank's default process group.

    backend: "gloo" (minidl's socket transport) for processes started by anything, meeting through a store:
    ``init_method`` "env://" (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; the default), "tcp://host:port" or
    "file:///path", or ``store=`` with rank and world_size; under mpiexec with no MASTER_ADDR it takes rank and
    size from MPI and meets over it. "mpi" for processes started by mpiexec; "nccl" for CUDA tensors (its host
    messages over MPI under mpiexec, else over gloo's sockets); "sim" for ranks as threads (store= the SimWorld;
    minidl.dist.sim.run does this). None: "mpi" under mpiexec, else "gloo".
    timeout: seconds or a timedelta (env MINIDL_DIST_TIMEOUT; default 30 min).
    stall_seconds: after that long, a waiting rank logs once what it waits on and which ranks have
    not arrived, and keeps waiting (env MINIDL_DIST_STALL_SECONDS; default 60 s).
    algorithm / chunk_elements / small_message_bytes / segment_bytes: see minidl.dist.algorithms.
    """
    if is_initialized():
        raise RuntimeError("init_process_group: trying to initialize the default process group twice")
    if init_method is not None and store is not None:
        raise ValueError("init_process_group: Cannot specify both init_method and store.")
    over_mpi = launched_by_mpi() and init_method is None and store is None and "MASTER_ADDR" not in os.environ
    name = communicators.canonical(backend if backend is not None else "mpi" if over_mpi else "gloo")
    config = config_from(name, algorithm, timeout, chunk_elements, small_message_bytes, segment_bytes,
                         stall_seconds)
    module = communicators.load(name)
    kept = None   # the store a gloo world met through (a master's server lives as long as its object)
    if name in ("sim", "mpi"):
        if name == "mpi" and init_method not in (None, "env://"):
            raise ValueError(f"init_process_group: init_method {init_method!r} is not for the mpi backend, whose "
                             f"ranks meet through mpiexec; use backend='gloo' for tcp:// and file://")
        comm = module.world_communicator(chunk_elements=config.chunk_elements, world=store, rank=rank)
    else:
        cupy = module.import_cupy() if name == "nccl" else None   # (a missing library before any rendezvous)
        host, kept = _host_world(over_mpi, init_method, store, rank, world_size, config)
        comm = host[0] if name == "gloo" else module.world_communicator(chunk_elements=config.chunk_elements,
                                                                        cupy=cupy, host=host)
    for given, actual, what in ((world_size, comm.size, "world_size"), (rank, comm.rank, "rank")):
        if given not in (-1, None) and given != actual:
            raise ValueError(f"init_process_group: {what}={given} but the {name} launch says {actual}")
    group = ProcessGroup(comm, range(comm.size), config)
    state = _process if module.ONE_RANK_PER_PROCESS else _thread.__dict__
    state.update(default=group, subgroups=[], store=kept)
    if module.ONE_RANK_PER_PROCESS:
        module.abort_on_uncaught_exception()
        hosts = group.hierarchy.hosts
        fit_threads_to_cores(hosts.count(hosts[group.rank]))


def _host_world(over_mpi, init_method, store, rank, world_size, config):
    """((the socket communicator over every rank, its module), the store the ranks met through): through
    ``store=``, the init method's store (env:// by default), or, under mpiexec, one rank 0 serves."""
    from .communicators import socket
    from .rendezvous import join, rendezvous
    if over_mpi:
        store, rank, world_size = _store_over_mpi(config.timeout)
    elif store is None:
        store, rank, world_size = next(rendezvous(init_method or "env://", rank, world_size,
                                                  timeout=timedelta(seconds=config.timeout)))
    elif rank in (-1, None) or world_size in (-1, None):
        raise ValueError(f"init_process_group: store= needs rank= and world_size= too (got rank={rank}, "
                         f"world_size={world_size})")
    join(store, rank, world_size, config.timeout, "init_process_group")
    comm = socket.world_communicator(config.chunk_elements, store=store, rank=rank, world_size=world_size,
                                     timeout=config.timeout)
    return (comm, socket), store


def _store_over_mpi(timeout):
    """(a TCPStore rank 0 serves, rank, size) with the rank and size mpiexec gave: its address goes out by MPI."""
    from mpi4py import MPI

    from .communicators.socket import address
    from .store import TCPStore
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0:
        store = TCPStore(address(), 0, size, is_master=True, timeout=timedelta(seconds=timeout),
                         wait_for_workers=False)
        comm.bcast((store.host, store.port), root=0)
        return store, rank, size
    host, port = comm.bcast(None, root=0)
    return TCPStore(host, port, size, is_master=False, timeout=timedelta(seconds=timeout)), rank, size


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, *, algorithm=None):
    """A group of some of the default group's ranks. Every rank of the default group must call it
    (in the same order as its other new_group calls); ranks outside get GroupMember.NON_GROUP_MEMBER.
    ``algorithm`` (a minidl extension) overrides the default group's, e.g. to compare algorithms."""
    world = resolve(None, "new_group")
    ranks = sorted(world.ranks if ranks is None else set(int(r) for r in ranks))
    _check_ranks("new_group", world, ranks)
    return _subgroup(world, ranks if world.rank in ranks else None, timeout, algorithm)


def new_subgroups_by_enumeration(ranks_per_subgroup_list, timeout=None, backend=None, pg_options=None,
                                 group_desc=None):
    """Disjoint groups of the default group's ranks, made at once (one split of the world, not one per group):
    (this rank's group, or None where it is in none; every group, GroupMember.NON_GROUP_MEMBER for those this
    rank is not in). Every rank of the default group must call it."""
    world = resolve(None, "new_subgroups_by_enumeration")
    lists = [sorted(int(r) for r in ranks) for ranks in ranks_per_subgroup_list]
    seen = [r for ranks in lists for r in ranks]
    for ranks in lists:
        _check_ranks("new_subgroups_by_enumeration", world, ranks)
    if len(seen) != len(set(seen)):
        raise ValueError(f"new_subgroups_by_enumeration: the subgroups {lists} overlap (rank(s) "
                         f"{sorted({r for r in seen if seen.count(r) > 1})} are in more than one)")
    mine = next((ranks for ranks in lists if world.rank in ranks), None)
    group = _subgroup(world, mine, timeout)
    every = [group if ranks is mine else GroupMember.NON_GROUP_MEMBER for ranks in lists]
    return (None if mine is None else group), every


def _check_ranks(what, world, ranks) -> None:
    bad = [r for r in ranks if r not in world.ranks]
    if bad or not ranks:
        raise ValueError(f"{what}: ranks {bad or ranks} are not ranks of the world (0..{world.size - 1})")


def _subgroup(world, ranks, timeout=None, algorithm=None):
    """This rank's group among ``ranks`` (global ranks in the group's rank order; None where it is in none), by
    one split of ``world`` that every rank of it makes at once, each with its own list: any number of disjoint
    groups in one go (a device mesh's rows, new_subgroups_by_enumeration)."""
    given = config_from(world.config.backend, algorithm or world.config.algorithm, timeout, None, None,
                        None)
    config = dataclasses.replace(world.config, algorithm=given.algorithm,
                                 timeout=world.config.timeout if timeout is None else given.timeout)
    mine = ranks is not None
    comm = world.p2p.split(min(ranks) if mine else None, ranks.index(world.rank) if mine else world.rank)
    if comm is None:
        return GroupMember.NON_GROUP_MEMBER
    group = ProcessGroup(comm, list(ranks), config)
    _state()["subgroups"].append(group)
    return group


def destroy_process_group(group=None) -> None:
    """Close ``group``, or the default group and every subgroup (pending collectives finish first)."""
    state = _state()
    if group is GroupMember.NON_GROUP_MEMBER:
        return
    if group is not None:
        group.close()
        if group in state.get("subgroups", []):
            state["subgroups"].remove(group)
        if group is not state.get("default"):
            return
    for g in state.pop("subgroups", []):
        g.close()
    default = state.pop("default", None)
    if default is not None and default is not group:
        default.close()
    state.pop("store", None)


def _set_pg_timeout(timeout, group=None) -> None:
    """How long ``group``'s operations (the default group's for None) may wait from now on, in seconds or a
    timedelta (torch's private function of this name): what a group started with a short timeout, to learn
    soon of a rank missing at its start, sets back for its collectives."""
    g, seconds = resolve(group, "_set_pg_timeout"), _seconds(timeout, "_set_pg_timeout: timeout")
    g.set_timeout(seconds)
    if g is _default():
        g.p2p.set_timeout(seconds)   # (the world's communicator: new_group's splits wait that long)


def get_rank(group=None) -> int:
    """This process's rank in ``group`` (the default group's for None); -1 outside the group."""
    g = resolve(group, "get_rank")
    return -1 if g is None else g.rank


def get_world_size(group=None) -> int:
    g = resolve(group, "get_world_size")
    return -1 if g is None else g.size


def get_backend(group=None) -> str:
    return resolve(group, "get_backend").config.backend
