"""Random and constant fills of DTensors on simulated ranks: whatever the placements (split, replicated, split
twice, strided, uneven), each rank's piece holds what one process's fill of the whole tensor holds there under
the same seed, and every rank's generator ends where one process's does — so nn.init on sharded parameters
initialises the single process's model."""
import numpy as np
import pytest

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist.device_mesh import init_device_mesh
from minidl.dist.tensor import Partial, Replicate, Shard, _StridedShard, distribute_tensor

LAYOUTS = [((4,), [Shard(0)]), ((4,), [Shard(1)]), ((4,), [Replicate()]), ((2, 2), [Shard(0), Shard(1)]),
           ((2, 2), [_StridedShard(0, split_factor=2), Shard(0)]), ((2, 2), [Replicate(), Shard(0)])]
INITS = {"uniform": lambda t: t.uniform_(-2.0, 3.0), "normal": lambda t: t.normal_(1.0, 0.5),
         "kaiming": lambda t: nn.init.kaiming_uniform_(t, a=5 ** 0.5), "xavier": nn.init.xavier_normal_,
         "trunc_normal": lambda t: nn.init.trunc_normal_(t, std=0.02),
         "ones": nn.init.ones_, "zeros": nn.init.zeros_, "constant": lambda t: nn.init.constant_(t, 2.5)}


def _filled(rank, mesh_shape, placements, init, shape):
    mesh = init_device_mesh("cpu", mesh_shape)
    d = nn.Parameter(distribute_tensor(minidl.full(shape, 7.0, dtype=minidl.float64), mesh, placements))
    minidl.manual_seed(3)
    INITS[init](d)
    after = minidl.rand(2, dtype=minidl.float64)   # (where the generator stands after the fill)
    return d.full_tensor().detach().numpy(), after.numpy()


@pytest.mark.parametrize("mesh_shape, placements", LAYOUTS, ids=lambda v: str(v))
@pytest.mark.parametrize("init", list(INITS))
def test_a_fill_gives_each_piece_the_whole_fills_values(mesh_shape, placements, init):
    shape = (7, 5)   # (uneven over 2 and 4)
    whole = minidl.full(shape, 7.0, dtype=minidl.float64)
    minidl.manual_seed(3)
    INITS[init](whole)
    want, want_after = whole.numpy(), minidl.rand(2, dtype=minidl.float64).numpy()
    for got, after in dist.sim.run(4, _filled, mesh_shape, placements, init, shape):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(after, want_after)


def _partial(rank):
    mesh = init_device_mesh("cpu", (2,))
    d = distribute_tensor(minidl.zeros(3), mesh, [Partial()])
    with pytest.raises(RuntimeError, match=r"DTensor.uniform_: the DTensor is a partial value"):
        d.uniform_()
    with pytest.raises(RuntimeError, match=r"DTensor.fill_: the DTensor is a partial value"):
        d.fill_(1.0)
    return True


def test_a_partial_dtensor_is_not_filled():
    assert dist.sim.run(2, _partial) == [True, True]
