"""Ops on DTensors by their sharding rules (minidl/dist/tensor/_rules/): for every placement pair the rule takes,
on 1-D and (2, 2) meshes of simulated ranks, the output equals the op on the whole tensors (numpy) and the
gradients equal the closed form, float64. (matmul so far: issue 54 extends this to every rule, generated.)"""
import itertools

import numpy as np

import minidl
import minidl.dist as dist
from minidl.dist.device_mesh import init_device_mesh
from minidl.dist.tensor import Replicate, Shard, distribute_tensor

A, B, W = (np.random.RandomState(s).randn(*shape) for s, shape in ((0, (5, 6)), (1, (6, 3)), (2, (5, 3))))


def _matmul_everywhere(rank):
    failures = []
    meshes = [init_device_mesh("cpu", (dist.get_world_size(),))]
    if dist.get_world_size() == 4:
        meshes.append(init_device_mesh("cpu", (2, 2)))
    for mesh in meshes:
        kinds = list(itertools.product([Shard(0), Shard(1), Replicate()], repeat=mesh.ndim))
        for pa, pb in itertools.product(kinds, repeat=2):
            a = distribute_tensor(minidl.tensor(A), mesh, pa).requires_grad_()
            b = distribute_tensor(minidl.tensor(B), mesh, pb).requires_grad_()
            c = a @ b
            (c.full_tensor() * minidl.tensor(W)).sum().backward()   # d/dA = W B^T, d/dB = A^T W
            if not (np.allclose(c.full_tensor().detach().numpy(), A @ B, rtol=0, atol=1e-12)
                    and np.allclose(a.grad.full_tensor().numpy(), W @ B.T, rtol=0, atol=1e-12)
                    and np.allclose(b.grad.full_tensor().numpy(), A.T @ W, rtol=0, atol=1e-12)
                    and a.grad.placements == tuple(pa) and b.grad.placements == tuple(pb)):
                failures.append(f"{mesh.shape}: {[str(p) for p in pa]} @ {[str(p) for p in pb]}")
    return failures


def test_matmul_by_its_rule_for_every_placement_pair():
    assert dist.sim.run(4, _matmul_everywhere) == [[]] * 4
    assert dist.sim.run(2, _matmul_everywhere) == [[]] * 2


def test_the_rule_moves_nothing_where_the_shards_line_up():
    """S(0) @ R -> S(0) and R @ S(1) -> S(1) send nothing; S(1) @ S(0) -> P(sum) sends nothing until reduced."""
    from minidl.dist import debug

    def fn(rank):
        mesh = init_device_mesh("cpu", (2,))
        out = []
        for pa, pb in (([Shard(0)], [Replicate()]), ([Replicate()], [Shard(1)]), ([Shard(1)], [Shard(0)])):
            a, b = distribute_tensor(minidl.tensor(A), mesh, pa), distribute_tensor(minidl.tensor(B), mesh, pb)
            before = debug.sent_bytes(mesh.get_group())
            c = a @ b
            out.append((str(c.placements[0]), debug.sent_bytes(mesh.get_group()) - before))
        return out
    assert dist.sim.run(2, fn)[0] == [("S(0)", 0), ("S(1)", 0), ("P(sum)", 0)]
