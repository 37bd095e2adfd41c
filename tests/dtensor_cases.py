"""DTensor cases shared by the sim tests and the mpiexec and gloo scripts: every transition between placements on a
1-D mesh over the world and, on 4 ranks, on a (2, 2) mesh, forward and backward in float64, uneven shards
included; elementwise arithmetic, factories, bytes sent, a distributed checkpoint saved and loaded in other
placements. Failures come back as strings.

The oracles: the whole tensor every rank makes from a seed (numpy); each piece cut from it by ``chunk``'s rule
(ceil(n / k) rows each, the last pieces shorter or empty), written here from that rule; gradients in closed form
(the gradient of sum(full * W) is W, whatever the placements on the way); bytes by each algorithm's formula.
"""
import itertools

import numpy as np

import minidl
import minidl.dist as dist
from minidl.dist import debug
from minidl.dist.device_mesh import init_device_mesh
from minidl.dist.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
import minidl.dist.tensor as dtensor

SHAPES = [(5, 6), (2, 3)]   # (5 rows on 4 ranks: 2, 2, 1, 0; 2 rows on 4: 1, 1, 0, 0)


def whole(shape, seed=0):
    return np.random.RandomState(seed).randn(*shape)


def chunk(a, k, r, axis):
    """Piece r of k of ``a`` along ``axis``, by chunk's rule."""
    n = a.shape[axis]
    step = -(-n // k)
    index = [slice(None)] * a.ndim
    index[axis] = slice(min(r * step, n), min((r + 1) * step, n))
    return a[tuple(index)]


def piece(a, mesh, placements):
    """This rank's piece of ``a``: each Shard cuts, in mesh-dimension order, what the ones before left;
    Partial(sum) holds a / k (distribute_tensor's split)."""
    for d, p in enumerate(placements):
        if p.is_shard():
            a = chunk(a, mesh.size(d), mesh.get_local_rank(d), p.dim)
        elif p.is_partial():
            a = a / mesh.size(d)
    return a


def meshes():
    n = dist.get_world_size()
    found = [("1-D", init_device_mesh("cpu", (n,)))]
    if n == 4:
        found.append(("2-D", init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))))
    return found


def kinds(ndim):
    return list(itertools.product([Shard(0), Shard(1), Replicate()], repeat=ndim))


def names(placements):
    return "[" + ", ".join(str(p) for p in placements) + "]"


def check(failures, ok, what):
    if not ok:
        failures.append(what)


def case_distribute(failures, label, mesh):
    for shape in SHAPES:
        a = whole(shape)
        for placements in kinds(mesh.ndim) + [(Partial(),) * mesh.ndim]:
            d = distribute_tensor(minidl.tensor(a), mesh, placements)
            check(failures, np.allclose(d.to_local().numpy(), piece(a, mesh, placements), rtol=0, atol=1e-15)
                  and tuple(d.shape) == shape and d.placements == tuple(placements),
                  f"{label} distribute_tensor {shape} {names(placements)}: piece {d.to_local().shape}")


def case_redistribute(failures, label, mesh):
    """Every pair of placements: the piece equals the one cut from the whole, the whole comes back, and the
    gradient of sum(full * W) reaches the input as W, lying as the input does."""
    for shape in SHAPES:
        a, w = whole(shape), whole(shape, seed=1)
        for src, dst in itertools.product(kinds(mesh.ndim), repeat=2):
            d = distribute_tensor(minidl.tensor(a), mesh, src).requires_grad_()
            e = d.redistribute(mesh, dst)
            full = e.full_tensor()
            (full * minidl.tensor(w)).sum().backward()
            what = f"{label} {shape} {names(src)} -> {names(dst)}"
            check(failures, np.array_equal(e.to_local().detach().numpy(), piece(a, mesh, dst)), f"{what}: piece")
            check(failures, np.array_equal(full.detach().numpy(), a), f"{what}: full_tensor")
            check(failures, d.grad is not None and d.grad.placements == tuple(src)
                  and np.allclose(d.grad.full_tensor().numpy(), w, rtol=0, atol=1e-14), f"{what}: gradient")


def case_partial(failures, label, mesh):
    """Pieces summing to the whole (each rank's its own, seeded by rank): to every Shard/Replicate placement;
    each piece's gradient is the whole gradient (the sum's derivative in each part is 1)."""
    rank = dist.get_rank()
    for shape in SHAPES:
        parts = [whole(shape, seed=10 + r) for r in range(mesh.size())]
        total, w = sum(parts), whole(shape, seed=1)
        for dst in kinds(mesh.ndim):
            mine = minidl.tensor(parts[rank]).requires_grad_()
            d = DTensor.from_local(mine, mesh, (Partial(),) * mesh.ndim)
            e = d.redistribute(mesh, dst)
            (e.full_tensor() * minidl.tensor(w)).sum().backward()
            what = f"{label} {shape} P(sum) -> {names(dst)}"
            check(failures, np.allclose(e.to_local().detach().numpy(), piece(total, mesh, dst), rtol=0, atol=1e-13),
                  f"{what}: piece")
            check(failures, np.allclose(mine.grad.numpy(), w, rtol=0, atol=1e-14), f"{what}: gradient")


def replicas(placements):
    return tuple(Replicate() if p.is_partial() else p for p in placements)


def case_partial_on_one_mesh_dim(failures, label, mesh):
    """On a 2-D mesh, a sum over one mesh dimension while the other shards or replicates: parts (one per
    coordinate of the partial dimension) summing to the whole, to every Shard/Replicate placement and to those
    that keep the sum while the other dimension moves; each piece's gradient is the whole gradient's box (the
    sum's derivative in each part is 1)."""
    if mesh.ndim != 2:
        return
    for shape in SHAPES:
        w = whole(shape, seed=1)
        for p_dim in (0, 1):
            parts = [whole(shape, seed=40 + c) for c in range(mesh.size(p_dim))]
            total = sum(parts)
            for other in (Shard(0), Shard(1), Replicate()):
                src = (Partial(), other) if p_dim == 0 else (other, Partial())
                as_replica = replicas(src)
                mine = piece(parts[mesh.get_local_rank(p_dim)], mesh, as_replica)
                local = minidl.tensor(np.ascontiguousarray(mine)).requires_grad_()
                strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
                d = DTensor.from_local(local, mesh, src, shape=shape, stride=strides)
                kept = [(Partial(), x) if p_dim == 0 else (x, Partial()) for x in (Shard(0), Shard(1), Replicate())]
                for dst in kinds(2) + kept:
                    e = d.redistribute(mesh, dst)
                    (e.full_tensor() * minidl.tensor(w)).sum().backward()
                    what = f"{label} {shape} {names(src)} -> {names(dst)}"
                    want = (piece(parts[mesh.get_local_rank(p_dim)], mesh, replicas(dst)) if dst in kept
                            else piece(total, mesh, dst))
                    check(failures, np.allclose(e.to_local().detach().numpy(), want, rtol=0, atol=1e-13),
                          f"{what}: piece")
                    check(failures, np.allclose(local.grad.numpy(), piece(w, mesh, as_replica), rtol=0, atol=1e-14),
                          f"{what}: gradient")
                    local.grad = None


def case_grad_placements(failures, label, mesh):
    """A loss on each rank's own copy (weights W_r differ by rank): declared Partial, the gradients of the
    copies add up: the input's gradient is sum_r W_r."""
    rank, n = dist.get_rank(), mesh.size()
    a = whole((5, 6))
    weights = [whole((5, 6), seed=20 + r) for r in range(n)]
    d = distribute_tensor(minidl.tensor(a), mesh, (Shard(0),) + (Replicate(),) * (mesh.ndim - 1)).requires_grad_()
    local = d.redistribute(mesh, (Replicate(),) * mesh.ndim).to_local(grad_placements=(Partial(),) * mesh.ndim)
    (local * minidl.tensor(weights[rank])).sum().backward()
    check(failures, np.allclose(d.grad.full_tensor().numpy(), sum(weights), rtol=0, atol=1e-13),
          f"{label} to_local(grad_placements=[P]): gradient")
    # a partial sum whose DTensor's gradient is declared Replicate: each part gets the whole gradient once
    part = minidl.ones(3, dtype=minidl.float64).requires_grad_()
    declared = DTensor.from_local(part, mesh, (Partial(),) * mesh.ndim, grad_placements=(Replicate(),) * mesh.ndim)
    declared.full_tensor().sum().backward()
    check(failures, np.array_equal(part.grad.numpy(), np.ones(3)), f"{label} from_local(P, grad_placements=[R])")
    # grad_placements is where the piece's gradient goes (torch's): Partial(sum) splits the whole gradient, 1/k each
    for src in (Replicate(), Partial()):
        piece_ = minidl.ones(3, dtype=minidl.float64).requires_grad_()
        DTensor.from_local(piece_, mesh, (src,) * mesh.ndim, grad_placements=(Partial(),) * mesh.ndim
                           ).full_tensor().sum().backward()
        check(failures, np.allclose(piece_.grad.numpy(), np.full(3, 1 / mesh.size()), rtol=0, atol=1e-15),
              f"{label} from_local({src}, grad_placements=[P]): {piece_.grad.numpy()}")


def case_elementwise(failures, label, mesh):
    a, b = whole((5, 6)), whole((5, 6), seed=1) + 3.0
    for placements in kinds(mesh.ndim):
        x, y = (distribute_tensor(minidl.tensor(v), mesh, placements) for v in (a, b))
        for name, got, want in [("a+b", x + y, a + b), ("a-b", x - y, a - b), ("a*b", x * y, a * b),
                                ("a/b", x / y, a / b), ("2*a", 2 * x, 2 * a), ("1-a", 1 - x, 1 - a),
                                ("-a", -x, -a), ("a**2", x ** 2, a ** 2), ("a/0-d", x / minidl.tensor(4.0), a / 4),
                                ("0-d*a", minidl.tensor(2.0) * x, 2 * a), ("0-d-a", minidl.tensor(1.0) - x, 1 - a)]:
            check(failures, got.placements == tuple(placements)
                  and np.allclose(got.full_tensor().numpy(), want, rtol=0, atol=1e-13),
                  f"{label} {names(placements)} {name}")
    rank = dist.get_rank()
    parts = [whole((5, 6), seed=10 + r) for r in range(mesh.size())]
    others = [whole((5, 6), seed=30 + r) for r in range(mesh.size())]
    p, q = (DTensor.from_local(minidl.tensor(v[rank]), mesh, (Partial(),) * mesh.ndim) for v in (parts, others))
    for name, got, want, stays in [("P+P", p + q, sum(parts) + sum(others), True),
                                   ("P*3", p * 3, 3 * sum(parts), True),
                                   ("P*P", p * q, sum(parts) * sum(others), False),
                                   ("P+1", p + 1, sum(parts) + 1, False)]:
        check(failures, got.placements[0].is_partial() == stays
              and np.allclose(got.full_tensor().numpy(), want, rtol=0, atol=1e-12), f"{label} {name}")


def case_factories(failures, label, mesh):
    placements = (Shard(0),) + (Replicate(),) * (mesh.ndim - 1)
    for name, made, want in [("zeros", dtensor.zeros(5, 3, device_mesh=mesh, placements=placements), 0.0),
                             ("ones", dtensor.ones((5, 3), device_mesh=mesh, placements=placements), 1.0),
                             ("full", dtensor.full((5, 3), 2.5, device_mesh=mesh, placements=placements), 2.5)]:
        check(failures, tuple(made.to_local().shape) == piece(np.zeros((5, 3)), mesh, placements).shape
              and np.array_equal(made.full_tensor().numpy(), np.full((5, 3), want)), f"{label} {name}")
    r = dtensor.randn(5, 3, device_mesh=mesh, placements=placements, dtype=minidl.float64).full_tensor().numpy()
    seen = [None] * dist.get_world_size()
    dist.all_gather_object(seen, r.tolist())
    check(failures, all(np.array_equal(np.array(s), r) for s in seen), f"{label} randn: one tensor on every rank")


def case_bytes(failures, label, mesh):
    """On a 1-D mesh with the ring algorithm (sim or gloo: MPI's native collectives are not counted): what each
    transition sends, by formula (float64 rows)."""
    if label != "1-D" or dist.get_backend() not in ("sim", "gloo") or mesh.get_group().config.algorithm != "ring":
        return
    k, me, group = mesh.size(), dist.get_rank(), mesh.get_group()
    rows, cols = 5, 8
    a = whole((rows, cols))
    step = -(-rows // k)
    held = [min(step, max(rows - r * step, 0)) for r in range(k)]   # rows per rank (chunk's)
    col_step = -(-cols // k)
    held_cols = [min(col_step, max(cols - r * col_step, 0)) for r in range(k)]
    size_check = (k - 1) * 2 * k * 8   # all_to_all's all-gather of every rank's (sent, expected) sizes
    cases = [
        ((Shard(0),), (Replicate(),), (k - 1) * step * cols * 8),                 # ring all-gather, padded
        ((Replicate(),), (Shard(0),), 0),                                           # a local slice
        ((Shard(0),), (Shard(1),), sum(held[me] * held_cols[r] * 8 for r in range(k) if r != me) + size_check),
        ((Partial(),), (Shard(0),), (k - 1) * step * cols * 8),                   # ring reduce-scatter, padded
        ((Partial(),), (Replicate(),), 2 * (k - 1) * rows * cols * 8 // k if rows * cols % k == 0 else None),
    ]
    for src, dst, formula in cases:
        d = (DTensor.from_local(minidl.tensor(a), mesh, src) if src[0].is_partial()
             else distribute_tensor(minidl.tensor(a), mesh, src))
        before = debug.sent_bytes(group)
        d.redistribute(mesh, dst)
        sent = debug.sent_bytes(group) - before
        if formula is not None:
            check(failures, sent == formula, f"bytes {names(src)} -> {names(dst)}: sent {sent}, formula {formula}")


def case_bytes_2d(failures, label, mesh):
    """[P, S(0)] -> [R, R] on a (2, 2) mesh with the ring algorithm: the partial sum is reduced on the half
    each rank holds (ring all-reduce: 2 (k - 1) / k of it), then the halves gathered ((k - 1) halves): N float64
    in all, where gathering first would send 1.5 N."""
    if label != "2-D" or dist.get_backend() not in ("sim", "gloo") or mesh.get_group(0).config.algorithm != "ring":
        return
    rows, cols = 4, 6
    half = rows // 2 * cols * 8
    d = DTensor.from_local(minidl.tensor(whole((rows // 2, cols))), mesh, (Partial(), Shard(0)))
    before = [debug.sent_bytes(mesh.get_group(m)) for m in (0, 1)]
    d.redistribute(mesh, (Replicate(), Replicate()))
    sent = sum(debug.sent_bytes(mesh.get_group(m)) for m in (0, 1)) - sum(before)
    formula = 2 * (2 - 1) * half // 2 + (2 - 1) * half
    check(failures, sent == formula, f"bytes [P(sum), S(0)] -> [R, R]: sent {sent}, formula {formula}")


def case_checkpoint(failures, label, mesh):
    """Saved by minidl.dist.checkpoint in one split, loaded in another: the whole comes back."""
    import shutil
    import tempfile
    import minidl.dist.checkpoint as dcp
    box = [tempfile.mkdtemp(prefix="dtensor_dcp_") if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box)
    a = whole((7, 5))
    saved = [Shard(0), Shard(1)][:mesh.ndim]
    loaded = [Replicate(), Shard(0)][-mesh.ndim:]
    dcp.save({"w": distribute_tensor(minidl.tensor(a), mesh, saved)}, checkpoint_id=box[0])
    into = distribute_tensor(minidl.zeros(7, 5, dtype=minidl.float64), mesh, loaded)
    dcp.load({"w": into}, checkpoint_id=box[0])
    check(failures, np.array_equal(into.full_tensor().numpy(), a), f"{label} checkpoint {names(saved)} -> "
                                                                   f"{names(loaded)}")
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(box[0], ignore_errors=True)


CASES = [case_distribute, case_redistribute, case_partial, case_partial_on_one_mesh_dim, case_grad_placements,
         case_elementwise, case_factories, case_bytes, case_bytes_2d, case_checkpoint]


def run_all():
    """Every case on every mesh: the failures (strings), the same on every rank where the math is."""
    failures = []
    for label, mesh in meshes():
        for case in CASES:
            try:
                case(failures, label, mesh)
            except Exception as e:   # noqa: BLE001 -- a case's error is a failure, named
                failures.append(f"{label} {case.__name__}: {type(e).__name__}: {e}")
    return failures
