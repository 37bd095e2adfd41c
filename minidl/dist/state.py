"""The default process group and subgroups: init_process_group, new_group, destroy_process_group,
get_rank, get_world_size.

Under MPI a process is one rank, so the default group belongs to the process. Under the sim
backend each rank is a thread, so the default group is per thread (set by ``init_process_group``
on that thread).
"""
from __future__ import annotations

import dataclasses
import threading

from . import communicators
from .group import ProcessGroup, config_from
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

    backend: "mpi" (or "gloo", the same here) for processes started by mpiexec; "sim" for ranks
    as threads (store= the SimWorld; minidl.dist.sim.run does this); None: "mpi" when launched
    by mpiexec. timeout: seconds or a timedelta (env MINIDL_DIST_TIMEOUT; default 30 min).
    stall_seconds: after that long, a waiting rank logs once what it waits on and which ranks have
    not arrived, and keeps waiting (env MINIDL_DIST_STALL_SECONDS; default 60 s).
    algorithm / chunk_elements / small_message_bytes / segment_bytes: see minidl.dist.algorithms.
    """
    if is_initialized():
        raise RuntimeError("init_process_group: trying to initialize the default process group twice")
    if init_method not in (None, "env://"):
        raise ValueError(f"init_process_group: init_method {init_method!r} is not supported; the MPI launch "
                         f"provides the rendezvous (use None or 'env://')")
    if backend is None:
        if not launched_by_mpi():
            raise RuntimeError("init_process_group: no backend given and no MPI launch detected; start the script "
                               "with `mpiexec -n N python script.py`, or pass backend='mpi' (or 'sim')")
        backend = "mpi"
    name = communicators.canonical(backend)
    config = config_from(name, algorithm, timeout, chunk_elements, small_message_bytes, segment_bytes,
                         stall_seconds)
    module = communicators.load(name)
    comm = module.world_communicator(chunk_elements=config.chunk_elements, world=store, store=store, rank=rank,
                                     world_size=world_size)
    for given, actual, what in ((world_size, comm.size, "world_size"), (rank, comm.rank, "rank")):
        if given not in (-1, None) and given != actual:
            raise ValueError(f"init_process_group: {what}={given} but the {name} launch says {actual}")
    group = ProcessGroup(comm, range(comm.size), config)
    state = _process if module.ONE_RANK_PER_PROCESS else _thread.__dict__
    state.update(default=group, subgroups=[])
    if module.ONE_RANK_PER_PROCESS:
        module.abort_on_uncaught_exception()
        hosts = group.hierarchy.hosts
        fit_threads_to_cores(hosts.count(hosts[group.rank]))


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, *, algorithm=None):
    """A group of some of the default group's ranks. Every rank of the default group must call it
    (in the same order as its other new_group calls); ranks outside get GroupMember.NON_GROUP_MEMBER.
    ``algorithm`` (a minidl extension) overrides the default group's, e.g. to compare algorithms."""
    world = resolve(None, "new_group")
    ranks = sorted(world.ranks if ranks is None else set(int(r) for r in ranks))
    bad = [r for r in ranks if r not in world.ranks]
    if bad or not ranks:
        raise ValueError(f"new_group: ranks {bad or ranks} are not ranks of the world (0..{world.size - 1})")
    given = config_from(world.config.backend, algorithm or world.config.algorithm, timeout, None, None,
                        None)
    config = dataclasses.replace(world.config, algorithm=given.algorithm,
                                 timeout=world.config.timeout if timeout is None else given.timeout)
    comm = world.p2p.split(0 if world.rank in ranks else None, world.rank)
    if comm is None:
        return GroupMember.NON_GROUP_MEMBER
    group = ProcessGroup(comm, ranks, config)
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


def get_rank(group=None) -> int:
    """This process's rank in ``group`` (the default group's for None); -1 outside the group."""
    g = resolve(group, "get_rank")
    return -1 if g is None else g.rank


def get_world_size(group=None) -> int:
    g = resolve(group, "get_world_size")
    return -1 if g is None else g.size


def get_backend(group=None) -> str:
    return resolve(group, "get_backend").config.backend
