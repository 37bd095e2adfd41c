"""_StridedShard, torch's placement for FSDP2 over tensor parallelism, on simulated ranks: its values and sizes as
torch's; every rank's rows as torch's — chunked in the order torch decodes from the split factors (its
redistribution's), or left to right where none (its compute_local_shape_and_global_offset's), those boxes matching
torch's wherever its two readings agree; where they do not, the pieces torch 2.13's redistribution made on gloo
(recorded). distribute_tensor, full_tensor, redistribute (both ways, backward, the collectives taken), from_local,
a checkpoint across placements; ops by their rules, those taking it as it lies and those gathering it first; an
optimizer and clip_grad_norm_ as one process. Oracles: numpy slicing at torch's rows, torch."""
import itertools

import numpy as np
import pytest

import minidl
import minidl.dist as dist
import minidl.dist.checkpoint as dcp
from minidl import nn
from minidl.dist.device_mesh import init_device_mesh
from minidl.dist.tensor import DTensor, Partial, Replicate, Shard, _StridedShard, distribute_tensor
from minidl.dist.tensor._spec import DTensorSpec
from minidl.dist.tensor.debug import CommDebugMode

torch = pytest.importorskip("torch")
from torch.distributed.tensor import placement_types as tp  # noqa: E402
from torch.distributed.tensor._dtensor_spec import DTensorSpec as TorchSpec  # noqa: E402
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset as torch_box  # noqa: E402


def SS(dim, f):
    return _StridedShard(dim, split_factor=f)


def _torch(p):
    if isinstance(p, _StridedShard):
        return tp._StridedShard(p.dim, split_factor=p.split_factor)
    return tp.Shard(p.dim) if p.is_shard() else tp.Replicate()


class _Mesh:
    """Sizes and one coordinate: what a spec's box and torch's decoding read of a mesh."""

    def __init__(self, shape, coordinate=None):
        self.shape, self.ndim, self.coordinate = tuple(shape), len(shape), coordinate

    def size(self, d):
        return self.shape[d]

    def get_coordinate(self):
        return self.coordinate


def torch_rows(n, dim, placements, sizes, coordinate):
    """torch's rows of ``dim``: chunked in the shard order torch decodes from the split factors (what its
    redistribution does), or, where none, left to right as compute_local_shape_and_global_offset composes them."""
    theirs = tuple(_torch(p) for p in placements)
    order = TorchSpec._maybe_convert_StridedShard_to_shard_order(theirs, _Mesh(sizes))
    rows = np.arange(n)
    steps = [(d, tp.Shard(dim)) for e in order or () if e.tensor_dim == dim for d in e.mesh_dims] if order else \
        [(d, p) for d, p in enumerate(theirs) if not isinstance(p, tp.Replicate) and p.dim == dim]
    for d, p in steps:
        if isinstance(p, tp._StridedShard):
            rows = rows[p.local_shard_size_and_offset(len(rows), sizes[d], coordinate[d], offset_mode=1)[1]]
        else:
            size, start = tp.Shard.local_shard_size_and_offset(len(rows), sizes[d], coordinate[d])
            rows = rows[start:start + size]
    return rows


def torch_piece(a, placements, sizes, coordinate):
    return a[np.ix_(*(torch_rows(n, i, placements, sizes, coordinate) for i, n in enumerate(a.shape)))]


# -- the placement ------------------------------------------------------------------------------------------
def test_the_placement_is_torchs_value():
    ours = [SS(0, 2), SS(1, 2), SS(0, 3), _StridedShard(0, sf=2), Shard(0), Replicate()]
    theirs = [tp._StridedShard(0, split_factor=2), tp._StridedShard(1, split_factor=2),
              tp._StridedShard(0, split_factor=3), tp._StridedShard(0, sf=2), tp.Shard(0), tp.Replicate()]
    assert [repr(p) for p in ours] == [repr(p) for p in theirs]
    assert [str(p) for p in ours] == [str(p) for p in theirs]
    for (a, ta), (b, tb) in itertools.product(zip(ours, theirs), repeat=2):
        assert (a == b) == (ta == tb) and (hash(a) == hash(b)) >= (a == b)
    for p, t in zip(ours[:3], theirs[:3]):
        assert (p.dim, p.split_factor, p.is_shard(), p.is_shard(0), isinstance(p, Shard)) == \
            (t.dim, t.split_factor, t.is_shard(), t.is_shard(0), isinstance(t, tp.Shard))
    with pytest.raises(TypeError, match="_StridedShard received both split_factor and sf"):
        _StridedShard(0, split_factor=2, sf=2)
    with pytest.raises(ValueError, match="split_factor must be at least 1, got 0"):
        _StridedShard(0, split_factor=0)
    with pytest.raises(AttributeError):
        SS(0, 2).split_factor = 3
    import minidl.dist.tensor as public
    assert "_StridedShard" not in public.__all__ and public.placement_types._StridedShard is _StridedShard


def test_sizes_follow_torch():
    for n, k, f in itertools.product(range(13), range(1, 5), range(1, 4)):
        for r in range(k):
            assert SS(0, f).local_shard_size_and_offset(n, k, r) == \
                tuple(tp._StridedShard(0, split_factor=f).local_shard_size_and_offset(n, k, r))


GRID = [((2, 2), (SS(0, 2), Shard(0))), ((2, 3), (SS(0, 3), Shard(0))), ((3, 2), (SS(0, 2), Shard(0))),
        ((4, 2), (SS(0, 2), Shard(0))), ((2, 2), (SS(1, 2), Shard(1))), ((2, 2), (SS(0, 2), Shard(1))),
        ((2, 2), (Shard(1), SS(0, 2))), ((4,), (SS(0, 2),)), ((3,), (SS(1, 3),)),
        ((2, 2, 2), (SS(0, 4), Shard(0), Shard(0))), ((2, 2, 2), (Shard(0), SS(0, 2), Shard(0))),
        ((2, 2, 2), (SS(0, 2), Replicate(), Shard(0)))]


def test_every_box_is_torchs_where_its_two_readings_agree():
    """Our box at every coordinate is the one of torch's rows; it is compute_local_shape_and_global_offset's
    except where that reads the placements otherwise than torch's redistribution (uneven sizes, 3+ ranks)."""
    disagree = 0
    for (sizes, placements), n in itertools.product(GRID, range(14)):
        shape = (n, 5)
        for c in itertools.product(*map(range, sizes)):
            ours = DTensorSpec(_Mesh(sizes, c), placements, shape).local_box()
            rows = [torch_rows(s, i, placements, sizes, c) for i, s in enumerate(shape)]
            box = (tuple(len(r) for r in rows), tuple(int(r[0]) if len(r) else s for r, s in zip(rows, shape)))
            theirs = tuple(map(tuple, torch_box(shape, sizes, list(c), [_torch(p) for p in placements])))
            assert ours == box, (sizes, placements, n, c)
            disagree += theirs != box
    assert disagree == 27   # (e.g. 7 rows on (3, 2), 9 on (4, 2), 6 on (2, 2, 2) with _S(0, 4): below)


def _where_torch_disagrees(rank):
    found = []
    for shape, placements, n, to in [((4, 2), (SS(0, 2), Shard(0)), 9, (Replicate(), Shard(0))),
                                     ((2, 2, 2), (SS(0, 4), Shard(0), Shard(0)), 6, (Replicate(), Shard(0), Shard(0)))]:
        d = distribute_tensor(minidl.arange(float(n)), init_device_mesh("cpu", shape), placements)
        found.append((d.to_local().tolist(), d.redistribute(placements=to).to_local().tolist(),
                      d.full_tensor().tolist() == list(range(n))))
    return found


def test_where_torchs_boxes_disagree_the_pieces_are_its_redistributions():
    """Recorded from torch 2.13 (gloo, 8 ranks): Replicate -> these placements, then to the next ones."""
    torch_pieces = [[[0, 1], [5], [2, 3], [6], [4], [7], [], [8]], [[0], [2], [3], [5], [1], [], [4], []]]
    torch_next = [[[0, 1, 2, 3, 4], [5, 6, 7, 8]] * 4, [[0, 1], [2], [3, 4], [5]] * 2]
    got = dist.sim.run(8, _where_torch_disagrees)
    for case in range(2):
        assert [g[case][0] for g in got] == torch_pieces[case]
        assert [g[case][1] for g in got] == torch_next[case] and all(g[case][2] for g in got)


# -- placing, gathering, moving ---------------------------------------------------------------------------------
LAYOUTS = [(SS(0, 2), Shard(0)), (SS(1, 2), Shard(1)), (SS(0, 2), Shard(1)), (SS(0, 2), Replicate()),
           (Shard(1), SS(0, 2))]
TARGETS = [(Replicate(), Shard(0)), (Shard(0), Replicate()), (Shard(0), Shard(0)), (Shard(1), Shard(0)),
           (Replicate(), Replicate()), (SS(1, 2), Shard(1)), (SS(0, 2), Shard(0))]


def _moves(rank, shape):
    mesh = init_device_mesh("cpu", (2, 2))
    c = mesh.get_coordinate()
    a = np.random.RandomState(0).randn(*shape)
    w = np.random.RandomState(1).randn(*shape)
    failures = []
    for placements in LAYOUTS:
        d = distribute_tensor(minidl.tensor(a), mesh, placements).requires_grad_()
        if not np.array_equal(d.to_local().detach().numpy(), torch_piece(a, placements, (2, 2), c)):
            failures.append(f"distribute {placements}")
        if not np.array_equal(d.full_tensor().detach().numpy(), a):
            failures.append(f"full_tensor {placements}")
        for to in TARGETS:
            moved = d.redistribute(placements=to)
            back = moved.redistribute(placements=placements)
            (back.full_tensor() * minidl.tensor(w)).sum().backward()
            if not (np.array_equal(moved.to_local().detach().numpy(), torch_piece(a, to, (2, 2), c))
                    and np.array_equal(back.to_local().detach().numpy(), d.to_local().detach().numpy())
                    and d.grad.placements == placements
                    and np.array_equal(d.grad.to_local().numpy(), torch_piece(w, placements, (2, 2), c))):
                failures.append(f"{placements} -> {to} -> back")
            d.grad = None
    return failures


@pytest.mark.parametrize("shape", [(8, 4), (7, 5), (5, 3), (2, 3)])
def test_distribute_full_tensor_and_redistribute_both_ways_with_gradients(shape):
    assert dist.sim.run(4, _moves, shape) == [[]] * 4


def _counted(rank):
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    d = distribute_tensor(minidl.ones(8, 3), mesh, [SS(0, 2), Shard(0)]).requires_grad_()
    counts = []
    for to in [(Replicate(), Shard(0)), (Replicate(), Replicate())]:
        with CommDebugMode() as forward:
            out = d.redistribute(placements=to)
        with CommDebugMode() as backward:
            out.to_local().sum().backward()
        counts.append((forward.get_comm_counts(), backward.get_total_counts()))
    with CommDebugMode() as cut:
        distribute_tensor(minidl.ones(8, 3), mesh, [SS(0, 2), Shard(0)], src_data_rank=None)
    return counts, cut.get_total_counts()


def test_fsdps_unshard_is_one_all_gather_and_its_backward_a_local_cut():
    """(_S(0, tp), S(0)) -> (R, S(0)): the data-parallel mesh dimension gathered alone, then the rest."""
    for counts, cut in dist.sim.run(4, _counted):
        assert counts == [({dist.all_gather: 1}, 0), ({dist.all_gather: 2}, 0)] and cut == 0


def _partial_in(rank):
    mesh = init_device_mesh("cpu", (2, 2))
    d = DTensor.from_local(minidl.arange(10.0).reshape(5, 2), mesh, [Partial(), Replicate()])
    return d.redistribute(placements=[SS(0, 2), Shard(0)]).to_local().numpy(), mesh.get_coordinate()


def test_a_partial_sum_moves_to_it_reduced():
    for piece, c in dist.sim.run(4, _partial_in):
        np.testing.assert_array_equal(piece, torch_piece(2 * np.arange(10.0).reshape(5, 2), (SS(0, 2), Shard(0)),
                                                         (2, 2), c))


def _from_local(rank):
    mesh = init_device_mesh("cpu", (2, 2))
    a = np.arange(21.0).reshape(7, 3)
    piece = minidl.tensor(torch_piece(a, (SS(0, 2), Shard(0)), (2, 2), mesh.get_coordinate()))
    given = DTensor.from_local(piece, mesh, [SS(0, 2), Shard(0)], shape=(7, 3), stride=(3, 1))
    measured = DTensor.from_local(piece, mesh, [SS(0, 2), Shard(0)], run_check=True)
    assumed = DTensor.from_local(minidl.ones(2, 3), mesh, [SS(0, 2), Shard(0)])
    try:
        DTensor.from_local(minidl.ones(2 if rank == 3 else 1, 3), mesh, [SS(0, 2), Shard(0)], run_check=True)
        refused = None
    except ValueError as e:
        refused = str(e)
    return (given.full_tensor().numpy(), measured.full_tensor().numpy(), tuple(measured.shape),
            tuple(assumed.shape), refused)


def test_from_local_given_measured_or_assumed_and_bad_pieces_named():
    for given, measured, shape, assumed, refused in dist.sim.run(4, _from_local):
        a = np.arange(21.0).reshape(7, 3)
        np.testing.assert_array_equal(given, a)
        np.testing.assert_array_equal(measured, a)
        assert shape == (7, 3) and assumed == (8, 3)   # (torch's from_local: (8, 3) for pieces of 2 rows)
        assert refused == ("DTensor.from_local(run_check=True): the local tensors cannot make one tensor of shape "
                           "[5, 3] placed [_S(0, 2), S(0)]: rank 0 has [1, 3], not [2, 3]; rank 3 has [2, 3], not "
                           "[1, 3]")


def _checkpoint(rank, path):
    mesh = init_device_mesh("cpu", (2, 2))
    a = np.random.RandomState(0).randn(7, 5)
    moves = [((SS(0, 2), Shard(0)), (Shard(0), Shard(1))), ((SS(0, 2), Replicate()), (Replicate(), Shard(0))),
             ((Shard(1), Replicate()), (SS(0, 2), Replicate())), ((Shard(0), Shard(1)), (SS(0, 2), Shard(0)))]
    failures = []
    for i, (saved, loaded) in enumerate(moves):
        dcp.save({"w": distribute_tensor(minidl.tensor(a), mesh, saved)}, checkpoint_id=f"{path}/{i}")
        into = distribute_tensor(minidl.zeros(7, 5, dtype=minidl.float64), mesh, loaded)
        dcp.load({"w": into}, checkpoint_id=f"{path}/{i}")
        if not np.array_equal(into.to_local().numpy(), torch_piece(a, loaded, (2, 2), mesh.get_coordinate())):
            failures.append(f"{saved} -> {loaded}")
    return failures


def test_a_checkpoint_reshards_to_and_from_it(tmp_path):
    """(_S(0, 2), R) holds its rows in runs (rows 0, 1, 4, 5 of 7 on the first rank): a box per run."""
    assert dist.sim.run(4, _checkpoint, str(tmp_path)) == [[]] * 4


# -- ops ---------------------------------------------------------------------------------------------------
A, B = np.random.RandomState(2).randn(7, 4), np.random.RandomState(3).randn(4,)


def _ops(rank):
    """(name, placements, value, gradient of the leaf as a whole, collectives) of each op on a (_S(0, 2), S(0))."""
    mesh = init_device_mesh("cpu", (2, 2))
    placed = (SS(0, 2), Shard(0))
    b, a_t = (distribute_tensor(minidl.tensor(v), mesh, [Replicate(), Replicate()]) for v in (B, A.T))
    ops = {"elementwise": lambda w: w * 2 + w.exp() - w, "broadcast": lambda w: w * b, "sum": lambda w: w.sum(),
           "mean": lambda w: w.mean(), "norm": lambda w: w.norm(), "sum(1)": lambda w: w.sum(1),
           "softmax": lambda w: w.softmax(1), "t": lambda w: w.t(), "unsqueeze": lambda w: w.unsqueeze(0),
           "matmul": lambda w: w @ a_t, "reshape": lambda w: w.reshape(14, 2), "cat": lambda w: minidl.cat([w, w], 1)}
    found = []
    for name, op in ops.items():
        w = distribute_tensor(minidl.tensor(A), mesh, placed).requires_grad_()
        with CommDebugMode() as comm:
            out = op(w)
        (out.full_tensor() ** 2).sum().backward()
        found.append((name, out.placements, out.full_tensor().detach().numpy(), w.grad.placements,
                      w.grad.full_tensor().numpy(), comm.get_total_counts()))
    return found


def _plain(name):
    w = minidl.tensor(A, requires_grad=True)
    out = {"elementwise": lambda: w * 2 + w.exp() - w, "broadcast": lambda: w * minidl.tensor(B),
           "sum": w.sum, "mean": w.mean, "norm": w.norm, "sum(1)": lambda: w.sum(1), "softmax": lambda: w.softmax(1),
           "t": w.t, "unsqueeze": lambda: w.unsqueeze(0), "matmul": lambda: w @ minidl.tensor(A.T),
           "reshape": lambda: w.reshape(14, 2), "cat": lambda: minidl.cat([w, w], 1)}[name]()
    (out ** 2).sum().backward()
    return out.detach().numpy(), w.grad.numpy()


def test_ops_take_it_as_it_lies_or_gather_it_first():
    """Where the rows a rank holds do not matter (elementwise, reductions, the whole norm) or follow their
    dimension (t, unsqueeze), nothing moves; other rules see it gathered (matmul, reshape, cat): all as one process."""
    rows, columns = (SS(0, 2), Shard(0)), (SS(1, 2), Shard(1))
    as_it_lies = {"elementwise": rows, "broadcast": rows, "sum(1)": rows, "softmax": rows, "t": columns,
                  "unsqueeze": columns}
    for found in dist.sim.run(4, _ops):
        for name, placements, value, grad_placements, grad, comm in found:
            want, want_grad = _plain(name)
            np.testing.assert_allclose(value, want, rtol=0, atol=1e-12, err_msg=name)
            np.testing.assert_allclose(grad, want_grad, rtol=0, atol=1e-12, err_msg=name)
            assert grad_placements == (SS(0, 2), Shard(0)), name
            if name in as_it_lies:
                assert (placements, comm) == (as_it_lies[name], 0), name
            elif name in ("sum", "mean", "norm"):
                assert comm == (2 if name == "norm" else 0), name   # (the norm: its sum of squares all-reduced)
            else:
                assert comm > 0 and not any(isinstance(p, _StridedShard) for p in placements), name


def _in_place(rank):
    mesh = init_device_mesh("cpu", (2, 2))
    w = distribute_tensor(minidl.tensor(A), mesh, [SS(0, 2), Shard(0)])
    same = w.mul_(2).add_(distribute_tensor(minidl.tensor(A), mesh, [Shard(0), Replicate()]))
    return same is w, w.placements, w.full_tensor().numpy()


def test_in_place_ops_write_its_pieces():
    for same, placements, value in dist.sim.run(4, _in_place):
        assert same and placements == (SS(0, 2), Shard(0))
        np.testing.assert_allclose(value, 3 * A, rtol=0, atol=1e-12)


X, Y = np.random.RandomState(4).randn(6, 4), np.random.RandomState(5).randn(6, 7)


def _train(model, x, y, params):
    optimizer = minidl.optim.Adam(params, lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        norm = nn.utils.clip_grad_norm_(params, 0.5)
        optimizer.step()
    return float(norm.full_tensor().item() if isinstance(norm, DTensor) else norm.item())


def _sharded_training(rank):
    """FSDP2 over a column-parallel Linear: its parameters (_S(0, 2), S(0)), stepped and clipped as they lie."""
    mesh = init_device_mesh("cpu", (2, 2))
    minidl.manual_seed(0)
    model = nn.Linear(4, 7).double()
    for key, p in list(model.named_parameters()):
        model.register_parameter(key, nn.Parameter(distribute_tensor(p.detach(), mesh, [SS(0, 2), Shard(0)])))
    whole = [Replicate(), Replicate()]
    norm = _train(model, distribute_tensor(minidl.tensor(X), mesh, whole),
                  distribute_tensor(minidl.tensor(Y), mesh, whole), list(model.parameters()))
    return norm, model.weight.full_tensor().detach().numpy(), model.weight.placements


def test_an_optimizer_and_clip_grad_norm_step_it_as_one_process():
    minidl.manual_seed(0)
    model = nn.Linear(4, 7).double()
    norm = _train(model, minidl.tensor(X), minidl.tensor(Y), list(model.parameters()))
    for got, weight, placements in dist.sim.run(4, _sharded_training):
        assert abs(got - norm) < 1e-12 and placements == (SS(0, 2), Shard(0))
        np.testing.assert_allclose(weight, model.weight.detach().numpy(), rtol=0, atol=1e-12)
