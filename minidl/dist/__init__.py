"""minidl.dist: distributed training primitives with torch.distributed's names.

    import minidl.dist as dist
    dist.init_process_group()                 # under `mpiexec -n N python script.py`
    dist.all_reduce(t, op=dist.ReduceOp.SUM)  # in place on a minidl tensor
    dist.sim.run(4, fn)                       # or: N ranks as threads, no mpiexec

Stores (`store/`: HashStore, FileStore, TCPStore, PrefixStore) and `rendezvous(url)` are the control plane
ranks meet through before a communicator exists.

Layers: communicators (mpi, nccl, sim; the ``backend`` of init_process_group) -> algorithms (collectives on point-to-point
messages) -> process groups -> this API. mpi4py is imported only when the mpi backend starts.
"""
from . import sim
from .algorithms import ALGORITHMS
from .algorithms.channel import DistTimeoutError
from .communicators.base import DistError
from .collectives import (all_gather, all_gather_into_tensor, all_reduce, all_reduce_buffer, all_to_all, barrier,
                          broadcast, gather, reduce, reduce_scatter, reduce_scatter_tensor, scatter)
from .group import ProcessGroup
from .objects import all_gather_object, broadcast_object_list
from .p2p import irecv, isend, recv, send
from .reduce_op import ReduceOp
from .rendezvous import register_rendezvous_handler, rendezvous
from .store import DistNetworkError, DistStoreError, FileStore, HashStore, PrefixStore, Store, TCPStore
from .state import (GroupMember, destroy_process_group, get_backend, get_rank, get_world_size, init_process_group,
                    is_available, is_initialized, new_group, new_subgroups_by_enumeration)
from .work import Work

group = GroupMember  # torch.distributed.group.WORLD


def plan(model, sample_inputs, world_size, **options):
    """Automatic parallelism (``minidl.dist.planner``): the layout of ``model`` on ``world_size`` ranks predicted
    fastest, with a table of every plan; see ``planner.plan``. (Imported on first use: the planner builds on most
    of minidl.dist.)"""
    from .planner import plan as planned
    return planned(model, sample_inputs, world_size, **options)
