"""minidl.dist.device_mesh and minidl.dist.tensor (part 1) on simulated ranks: the shared cases
(tests/dtensor_cases.py: every transition on 1-D and 2-D meshes, forward and backward, bytes by formula), the
mesh's answers and groups, torch's placement values and chunk sizes (torch is the oracle), and each bad input's
error. The same cases run under mpiexec in tests/test_dist_mpi.py."""
import numpy as np
import pytest

import minidl
import minidl.dist as dist
import dtensor_cases
from minidl.dist.device_mesh import DeviceMesh, init_device_mesh
from minidl.dist.tensor import DTensor, Partial, Placement, Replicate, Shard, distribute_tensor

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("n, algorithm", [(2, "ring"), (4, "ring"), (4, "auto")])
def test_every_case(n, algorithm):
    assert dist.sim.run(n, lambda rank: dtensor_cases.run_all(), algorithm=algorithm) == [[]] * n


def test_the_old_import_path_is_the_same_api():
    import minidl.dist._tensor as old
    assert old.DTensor is DTensor and old.Shard is Shard and old.distribute_tensor is distribute_tensor


# -- the mesh ------------------------------------------------------------------------------------------
def test_a_mesh_answers_as_torchs_and_its_groups_are_its_rows_and_columns():
    def fn(rank):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        found = {}
        for name in ("dp", "tp"):
            t = minidl.tensor([float(rank)])
            dist.all_reduce(t, group=mesh.get_group(name))
            found[name] = t.item()
        return (repr(mesh), mesh.shape, mesh.ndim, mesh.size(), mesh.size(1), mesh.get_rank(), mesh.get_coordinate(),
                mesh.get_local_rank("tp"), mesh.get_local_rank(0), found, mesh["tp"].mesh.tolist(), repr(mesh["dp"]),
                mesh["dp", "tp"] == mesh, mesh.mesh.tolist())
    got = dist.sim.run(4, fn)
    ranks = np.arange(4).reshape(2, 2)
    for rank, g in enumerate(got):
        dp, tp = divmod(rank, 2)
        assert g[:9] == ("DeviceMesh((dp=2, tp=2), 'cpu', stride=(2, 1))", (2, 2), 2, 4, 2, rank, (dp, tp), tp, dp)
        assert g[9] == {"dp": float(ranks[:, tp].sum()), "tp": float(ranks[dp].sum())}   # numpy: the column, the row
        assert g[10] == ranks[dp].tolist() and g[11] == "DeviceMesh((dp=2), 'cpu', stride=(1,))"
        assert g[12] is True and g[13] == ranks.tolist()


def test_a_mesh_smaller_than_the_world_leaves_the_rest_out_and_from_group_wraps_a_group():
    def fn(rank):
        small = init_device_mesh("cpu", (2,))
        whole = DeviceMesh.from_group(dist.new_group([0, 1, 2, 3]), "cpu")
        return small.get_coordinate(), repr(whole), whole.get_local_rank()
    assert dist.sim.run(4, fn) == [((0,), "DeviceMesh((4,), 'cpu', stride=(1,))", 0),
                                   ((1,), "DeviceMesh((4,), 'cpu', stride=(1,))", 1),
                                   (None, "DeviceMesh((4,), 'cpu', stride=(1,))", 2),
                                   (None, "DeviceMesh((4,), 'cpu', stride=(1,))", 3)]


def test_new_subgroups_by_enumeration_makes_disjoint_groups_at_once():
    def fn(rank):
        mine, every = dist.new_subgroups_by_enumeration([[0, 2], [1, 3]])
        t = minidl.tensor([float(rank)])
        dist.all_reduce(t, group=mine)
        return t.item(), mine.ranks, sum(g is dist.GroupMember.NON_GROUP_MEMBER for g in every)
    assert dist.sim.run(4, fn) == [(2.0, [0, 2], 1), (4.0, [1, 3], 1), (2.0, [0, 2], 1), (4.0, [1, 3], 1)]
    with pytest.raises(ValueError, match=r"overlap \(rank\(s\) \[1\] are in more than one\)"):
        dist.sim.run(2, lambda rank: dist.new_subgroups_by_enumeration([[0, 1], [1]]))


@pytest.mark.parametrize("call, error, message", [
    (lambda m, m1: m.get_group(), RuntimeError, "Found the DeviceMesh have 2 dimensions. Optional kwarg `mesh_dim` "
                                                "needs to be specified when device_mesh.ndim > 1."),
    (lambda m, m1: m["pp"], KeyError, r"Invalid mesh_dim_names \('pp',\) specified. Valid mesh_dim_names are "
                                      r"\['dp', 'tp'\]."),
    (lambda m, m1: m["tp", "dp"], KeyError, "Mesh dim indices should be in ascending order."),
    (lambda m, m1: m.get_group("pp"), KeyError, "Mesh dimension 'pp' does not exist."),
    (lambda m, m1: m1["x"], RuntimeError, "Cannot slice a DeviceMesh without mesh_dim_names!"),
    (lambda m, m1: init_device_mesh("cpu", (3, 2)), RuntimeError,
     "Mesh should not be bigger than default world size 4, but found 6 ranks!"),
    (lambda m, m1: init_device_mesh("cpu", (2, 2), mesh_dim_names=("a",)), RuntimeError,
     r"mesh_shape and mesh_dim_names should have same length! Found len\(mesh_dim_names\): 1 and "
     r"len\(mesh_shape\):2."),
    (lambda m, m1: init_device_mesh("cpu:0", (4,)), RuntimeError, "Device type with index is not supported"),
])
def test_bad_meshes_get_torchs_errors(call, error, message):
    def fn(rank):
        call(init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")), init_device_mesh("cpu", (4,)))
    with pytest.raises(error, match=message):
        dist.sim.run(4, fn)


# -- placements -----------------------------------------------------------------------------------------
def test_placements_are_torchs_values():
    from torch.distributed import tensor as tt
    ours = [Shard(0), Shard(1), Replicate(), Partial(), Partial("avg"), Partial("max")]
    theirs = [tt.Shard(0), tt.Shard(1), tt.Replicate(), tt.Partial(), tt.Partial("avg"), tt.Partial("max")]
    assert [repr(p) for p in ours] == [repr(p) for p in theirs]
    assert [str(p) for p in ours] == [str(p) for p in theirs]
    for (a, ta), (b, tb) in zip(zip(ours, theirs), zip(ours[::-1], theirs[::-1])):
        assert (a == b) == (ta == tb) and a.is_shard() == ta.is_shard() and a.is_partial() == ta.is_partial()
    assert all(isinstance(p, Placement) for p in ours) and hash(Shard(0)) == hash(Shard(0))
    with pytest.raises(AttributeError):
        Shard(0).dim = 1


def test_placements_pickle_as_torchs_do():
    """(A plan of parallel styles travels to spawned processes by pickle.)"""
    import pickle
    from minidl.dist.tensor.placement_types import _StridedShard
    for p in [Shard(0), Shard(-1), Replicate(), Partial("avg"), _StridedShard(0, split_factor=2)]:
        back = pickle.loads(pickle.dumps(p))
        assert back == p and type(back) is type(p) and repr(back) == repr(p)


def test_shard_sizes_follow_torch_chunk():
    from torch.distributed import tensor as tt
    for n in range(0, 12):
        for k in range(1, 6):
            for r in range(k):
                theirs = tt.Shard.local_shard_size_and_offset(n, k, r)
                assert Shard.local_shard_size_and_offset(n, k, r) == tuple(theirs)


# -- bad input ---------------------------------------------------------------------------------------------
def _on_two(fn):
    return dist.sim.run(2, fn)


@pytest.mark.parametrize("call, error, message", [
    (lambda m, t: distribute_tensor(t, m, [Shard(0), Shard(1)]), ValueError,
     r"`placements` must have the same length as `device_mesh.ndim`! Found placements length: 2, and "
     r"device_mesh.ndim: 1."),
    (lambda m, t: distribute_tensor(t, m, [Shard(2)]), IndexError,
     r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"),
    (lambda m, t: distribute_tensor(t, m, [Shard(0)]).redistribute(m, [Partial()]), RuntimeError,
     r"Can not redistribute from S\(0\) to P\(sum\), redistributing to Partial is for internal use only!"),
    (lambda m, t: distribute_tensor(t, m, [Shard(0)]) + t, RuntimeError,
     "minidl.add got mixed minidl.Tensor and DTensor, need to convert all minidl.Tensor to DTensor before "
     "calling distributed operators!"),
    (lambda m, t: t - distribute_tensor(t, m, [Shard(0)]), RuntimeError,
     "minidl.sub got mixed minidl.Tensor and DTensor, need to convert all minidl.Tensor to DTensor"),
    (lambda m, t: minidl.add(t, distribute_tensor(t, m, [Shard(0)])), RuntimeError,
     "got mixed minidl.Tensor and DTensor, need to convert all minidl.Tensor to DTensor"),
    (lambda m, t: t.t() @ distribute_tensor(t, m, [Shard(0)]), RuntimeError,
     "minidl.matmul got mixed minidl.Tensor and DTensor"),
    (lambda m, t: minidl.matmul(distribute_tensor(t, m, [Shard(0)]), t.t()), RuntimeError,
     "minidl.matmul got mixed minidl.Tensor and DTensor"),
    (lambda m, t: minidl.cumsum(distribute_tensor(t, m, [Shard(0)]), 0), NotImplementedError,
     r"minidl.cumsum has no sharding rule for DTensors \(inputs placed \[S\(0\)\]\)"),
    (lambda m, t: distribute_tensor(t, m, [Shard(0)]) @ distribute_tensor(t[0], m), NotImplementedError,
     r"minidl.matmul's sharding rule takes two DTensors of one rank .* \(inputs placed \[S\(0\)\], \[R\]\)"),
    (lambda m, t: distribute_tensor(t, m, [Shard(0)]).redistribute(m), RuntimeError,
     "placements is needed for redistribute!"),
    (lambda m, t: distribute_tensor(distribute_tensor(t, m, [Shard(0)]), m, [Replicate()]), ValueError,
     r"Cannot distribute a DTensor with placements \(Shard\(dim=0\),\) to a different placements"),
    (lambda m, t: distribute_tensor(t, m, [Shard(0)], src_data_rank=2), ValueError,
     r"src_data_rank 2 is not a rank of mesh dimension 0 \(of size 2\)"),
    (lambda m, t: distribute_tensor(t, m, [Shard(0)]) * distribute_tensor(t[0, :1].expand(3), m), RuntimeError,
     r"mul: shapes \[4, 2\] and \[3\] cannot be broadcast together"),
    (lambda m, t: distribute_tensor(t, m) + distribute_tensor(t, init_device_mesh("cpu", (1,))), RuntimeError,
     "Cannot run minidl.add on inputs with different meshes"),
    (lambda m, t: DTensor.from_local(t, m, [Shard(0)], shape=(8, 2)), RuntimeError,
     "Please pass both shape and stride at the same time."),
    (lambda m, t: DTensor.from_local(t[:3 - 2 * dist.get_rank()], m, [Shard(0)], run_check=True), ValueError,
     r"the local tensors along mesh dimension 0 \(S\(0\)\) cannot make one tensor: rank 0 has \[3, 2\]; "
     r"rank 1 has \[1, 2\] \(a Shard\(0\)'s pieces must have chunk's sizes\)"),
])
def test_bad_input_is_named(call, error, message):
    with pytest.raises(error, match=message):
        _on_two(lambda rank: call(init_device_mesh("cpu", (2,)), minidl.arange(8.0).reshape(4, 2)))


def test_from_local_measures_uneven_pieces_with_run_check_and_assumes_even_ones_without():
    def fn(rank):
        mesh = init_device_mesh("cpu", (2,))
        local = minidl.ones(3 - rank, 2)   # chunk's sizes for 5 rows: 3, 2
        return (tuple(DTensor.from_local(local, mesh, [Shard(0)], run_check=True).shape),
                tuple(DTensor.from_local(local, mesh, [Shard(0)]).shape))
    assert _on_two(fn) == [((5, 2), (6, 2)), ((5, 2), (4, 2))]


# -- distribute_module -------------------------------------------------------------------------------------
class _Scale(minidl.nn.Module):
    """out = x * s + b, b placed as s first (part 1's DTensor ops are elementwise between equal placements)."""

    def __init__(self, n):
        super().__init__()
        self.s = minidl.nn.Parameter(minidl.randn(4, n, dtype=minidl.float64))
        self.b = minidl.nn.Parameter(minidl.randn(4, n, dtype=minidl.float64))
        self.register_buffer("seen", minidl.zeros(1))


def _forward(self, x):
    return x * self.s + self.b.redistribute(self.s.device_mesh, self.s.placements)


_Scale.forward = _forward


def test_distribute_module_places_parameters_and_runs_hooks_around_forward():
    """partition_fn shards s by rows; b, left alone, and the buffer are replicated from rank 0 (each rank
    starts from its own random values); input_fn makes the input a DTensor like s, output_fn the whole output.
    The output and the gradients equal numpy's on rank 0's values."""
    from minidl.dist.tensor import distribute_module
    x = np.arange(20.0).reshape(4, 5)

    def fn(rank):
        minidl.manual_seed(rank)   # (different values on every rank: distribution takes rank 0's)
        mesh = init_device_mesh("cpu", (2,))
        model = _Scale(5)
        start = [model.s.detach().numpy().copy(), model.b.detach().numpy().copy()]
        starts = [None, None]
        dist.all_gather_object(starts, start)

        def partition(name, module, device_mesh):
            if name == "":
                module.register_parameter("s", minidl.nn.Parameter(distribute_tensor(module.s, device_mesh,
                                                                                        [Shard(0)])))

        model = distribute_module(model, mesh, partition,
                                  input_fn=lambda m, inputs, mesh: (distribute_tensor(inputs[0], mesh, [Shard(0)]),),
                                  output_fn=lambda m, out, mesh: out.full_tensor())
        b = model.b
        out = model(minidl.tensor(x))
        (out * out).sum().backward()
        with pytest.raises(RuntimeError, match="distribute_module should only be called once"):
            distribute_module(model, mesh)
        return (out.detach().numpy(), starts[0], model.s.grad.full_tensor().numpy(), b.grad.full_tensor().numpy(),
                [type(p).__name__ for p in model.parameters()], all(isinstance(p, minidl.nn.Parameter)
                                                                    for p in model.parameters()),
                model.s.placements, b.placements, model.seen.placements)
    for out, (s, b), grad_s, grad_b, kinds, params, ps, pb, pbuf in dist.sim.run(2, fn):
        assert np.allclose(out, x * s + b, rtol=0, atol=1e-12)
        assert np.allclose(grad_s, 2 * out * x, rtol=0, atol=1e-12) and np.allclose(grad_b, 2 * out, rtol=0,
                                                                                     atol=1e-12)
        assert params and ps == (Shard(0),) and pb == (Replicate(),) and pbuf == (Replicate(),)


def test_run_check_joins_nested_shards_from_the_last_mesh_dimension():
    """6 rows at [S(0), S(0)] on (2, 2): 3 and 3 by the first mesh dimension, then 2 and 1 of each."""
    def fn(rank):
        mesh = init_device_mesh("cpu", (2, 2))
        rows = [2, 1][mesh.get_local_rank(1)]
        return tuple(DTensor.from_local(minidl.ones(rows, 2), mesh, [Shard(0), Shard(0)], run_check=True).shape)
    assert dist.sim.run(4, fn) == [(6, 2)] * 4


def test_src_data_rank_is_a_group_rank_of_every_mesh_dimension_and_sub_meshes_work():
    """Each rank offers its own data; src_data_rank=1 takes group rank 1 of each mesh dimension: coordinate
    (1, 1), rank 3. On a sub-mesh (mesh["tp"]) the default 0 is the row's first rank."""
    def fn(rank):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        mine = minidl.full((4, 2), float(rank), dtype=minidl.float64)
        whole = distribute_tensor(mine, mesh, [Shard(0), Replicate()], src_data_rank=1).full_tensor()
        row = distribute_tensor(mine, mesh["tp"], [Shard(0)]).full_tensor()
        return whole.numpy()[0, 0], row.numpy()[0, 0]
    assert dist.sim.run(4, fn) == [(3.0, 0.0), (3.0, 0.0), (3.0, 2.0), (3.0, 2.0)]


def test_ranks_outside_a_smaller_mesh_hold_nothing_and_take_no_part():
    def fn(rank):
        mesh = init_device_mesh("cpu", (2,))
        d = distribute_tensor(minidl.arange(8.0).reshape(4, 2), mesh, [Shard(0)])
        e = DTensor.from_local(minidl.ones(2, 2), mesh, [Shard(0)])
        return (tuple(d.full_tensor().shape), tuple(d.redistribute(mesh, [Replicate()]).to_local().shape),
                tuple((d + e).to_local().shape))
    assert dist.sim.run(4, fn) == [((4, 2), (4, 2), (2, 2))] * 2 + [((0,), (0,), (0,))] * 2


def test_a_mixed_partial_list_is_refused_as_torch_refuses_it():
    with pytest.raises(ValueError, match="Mixed Partial reduce types are not supported in the same placement list"):
        dist.sim.run(4, lambda rank: DTensor.from_local(
            minidl.ones(2), init_device_mesh("cpu", (2, 2)), [Partial("max"), Partial("sum")]))
