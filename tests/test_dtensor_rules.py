"""Ops on DTensors by their sharding rules (minidl/dist/tensor/_rules/): for every placement pair the rule takes,
on 1-D and (2, 2) meshes of simulated ranks, the output equals the op on the whole tensors (numpy) and the
gradients equal the closed form, float64: the cases the generated sweep (test_dtensor_sweep.py) does not reach —
every placement pair of a matmul, bytes moved, partial sums kept, dropout's random stream, backward from a
DTensor, shapes the registry's samples lack."""
import itertools

import numpy as np

import minidl
import minidl.dist as dist
from minidl.dist.device_mesh import init_device_mesh
from minidl.dist.tensor import Replicate, Shard, distribute_tensor

A, B, W = (np.random.RandomState(s).randn(*shape) for s, shape in ((0, (5, 6)), (1, (6, 3)), (2, (5, 3))))


def _mesh():
    """A (2, 2) mesh on 4 ranks, a 1-D one on 2."""
    return init_device_mesh("cpu", (2, 2)) if dist.get_world_size() == 4 else init_device_mesh("cpu", (2,))


def agrees(got, want, pairs=(), exact=False) -> bool:
    """Whether DTensor ``got`` is plain ``want`` (the op on whole tensors), and, after a loss sum(out * W)
    (W seeded) through each, whether each (DTensor leaf, plain leaf) of ``pairs`` has the same gradient."""
    w = minidl.tensor(np.random.RandomState(5).randn(*want.shape))
    (got.full_tensor() * w).sum().backward()
    (want * w).sum().backward()
    same = np.array_equal if exact else (lambda a, b: np.allclose(a, b, rtol=0, atol=1e-12))
    return same(got.full_tensor().detach().numpy(), want.detach().numpy()) and all(
        np.allclose(d.grad.full_tensor().numpy(), x.grad.numpy(), rtol=0, atol=1e-12) for d, x in pairs)


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


def test_partial_sums_stay_partial_where_the_op_is_linear_in_them():
    from minidl.dist.tensor import DTensor, Partial

    def fn(rank):
        mesh = init_device_mesh("cpu", (2,))
        p = DTensor.from_local(minidl.tensor(A * (rank + 1)), mesh, [Partial()])
        q = DTensor.from_local(minidl.tensor(A * (rank + 2)), mesh, [Partial()])
        r = distribute_tensor(minidl.tensor(A + 1), mesh, [Replicate()])
        cases = [("add", minidl.add(p, q), 3 * A + 5 * A, True), ("mul", minidl.mul(p, r), 3 * A * (A + 1), True),
                 ("div", minidl.div(r, p), (A + 1) / (3 * A), False), ("exp", minidl.exp(p), np.exp(3 * A), False),
                 ("neg", minidl.neg(p), -3 * A, True)]
        return [(name, got.placements[0].is_partial() == stays,
                 bool(np.allclose(got.full_tensor().numpy(), want, rtol=1e-13, atol=1e-13)))
                for name, got, want, stays in cases]
    for name, placed_right, right in dist.sim.run(2, fn)[0]:
        assert placed_right and right, name


def _reductions_everywhere(rank):
    """sum and mean over every choice of dims (keepdim or not), softmax and log_softmax over each dim, on every
    placement, against the whole tensor's (numpy), with gradients against the plain op's."""
    failures = []
    mesh = _mesh()
    kinds = list(itertools.product([Shard(0), Shard(1), Replicate()], repeat=mesh.ndim))
    calls = [(f"{n}({d}, keepdim={k})", (lambda t, n=n, d=d, k=k: getattr(minidl, n)(t, d, k)))
             for n in ("sum", "mean") for d in (None, 0, 1, (0, 1)) for k in (False, True) if d is not None or not k]
    calls += [(f"{n}({d})", (lambda t, n=n, d=d: getattr(minidl, n)(t, d))) for n in ("softmax", "log_softmax")
              for d in (0, 1)]
    for placements in kinds:
        for name, call in calls:
            a = distribute_tensor(minidl.tensor(A), mesh, placements).requires_grad_()
            whole = minidl.tensor(A).requires_grad_()
            if not agrees(call(a), call(whole), [(a, whole)]):
                failures.append(f"{name} {[str(p) for p in placements]}")
    return failures


def test_reductions_and_softmax_by_their_rules():
    assert dist.sim.run(4, _reductions_everywhere) == [[]] * 4
    assert dist.sim.run(2, _reductions_everywhere) == [[]] * 2


def _linear_everywhere(rank):
    """linear(x, w, b) for every placement of x (4, 5) and w (3, 5), the bias whole or split on the first mesh
    dimension: column- and row-parallel and the rest, on 1-D and 2-D meshes, against numpy, with gradients in
    closed form."""
    failures = []
    mesh = _mesh()
    X, Wt, Bias, G = (np.random.RandomState(s).randn(*shape) for s, shape in ((6, (4, 5)), (7, (3, 5)), (8, (3,)),
                                                                                (9, (4, 3))))
    two = list(itertools.product([Shard(0), Shard(1), Replicate()], repeat=mesh.ndim))
    biases = [(Replicate(),) * mesh.ndim, (Shard(0),) + (Replicate(),) * (mesh.ndim - 1)]
    for px, pw, pb in itertools.product(two, two, biases):
        x = distribute_tensor(minidl.tensor(X), mesh, px).requires_grad_()
        w = distribute_tensor(minidl.tensor(Wt), mesh, pw).requires_grad_()
        b = distribute_tensor(minidl.tensor(Bias), mesh, pb).requires_grad_()
        y = minidl.nn.functional.linear(x, w, b)
        (y.full_tensor() * minidl.tensor(G)).sum().backward()
        if not (np.allclose(y.full_tensor().detach().numpy(), X @ Wt.T + Bias, rtol=0, atol=1e-12)
                and np.allclose(x.grad.full_tensor().numpy(), G @ Wt, rtol=0, atol=1e-12)
                and np.allclose(w.grad.full_tensor().numpy(), G.T @ X, rtol=0, atol=1e-12)
                and np.allclose(b.grad.full_tensor().numpy(), G.sum(0), rtol=0, atol=1e-12)):
            failures.append(f"{[str(p) for p in px]} {[str(p) for p in pw]} {[str(p) for p in pb]}")
    return failures


def test_linear_by_its_rule_column_and_row_parallel():
    assert dist.sim.run(4, _linear_everywhere) == [[]] * 4
    assert dist.sim.run(2, _linear_everywhere) == [[]] * 2


def _views_everywhere(rank):
    """transpose, t, permute, unsqueeze, cat and stack on every placement of a (5, 6) tensor (cat and stack of
    two), against numpy, with gradients against the plain op's."""
    failures = []
    mesh = _mesh()
    kinds = list(itertools.product([Shard(0), Shard(1), Replicate()], repeat=mesh.ndim))
    other = A + 1
    calls = [("transpose", lambda x, y: x.transpose(0, 1)), ("t", lambda x, y: x.t()),
             ("permute", lambda x, y: x.permute(1, 0)), ("unsqueeze", lambda x, y: x.unsqueeze(1)),
             ("cat0", lambda x, y: minidl.cat([x, y], 0)), ("cat1", lambda x, y: minidl.cat([x, y], 1)),
             ("stack", lambda x, y: minidl.stack([x, y], 1)), ("flat", lambda x, y: x.reshape(30)),
             ("split", lambda x, y: x.reshape(5, 2, 3)), ("other", lambda x, y: x.reshape(6, 5)),
             ("view", lambda x, y: x.view(-1, 3)), ("rows", lambda x, y: minidl.cat([x, y], 0).reshape(2, 5, 6)),
             ("flatten", lambda x, y: minidl.stack([x, y]).flatten(1)),
             ("split", lambda x, y: minidl.cat([p * (i + 1) for i, p in enumerate(x.split(2, 1))], 1)),
             ("chunk", lambda x, y: minidl.cat([p * (i + 1) for i, p in enumerate(x.chunk(2, 0))], 0))]
    for placements in kinds:
        for name, call in calls:
            a = distribute_tensor(minidl.tensor(A), mesh, placements).requires_grad_()
            b = distribute_tensor(minidl.tensor(other), mesh, placements).requires_grad_()
            wa, wb = minidl.tensor(A).requires_grad_(), minidl.tensor(other).requires_grad_()
            if not agrees(call(a, b), call(wa, wb), [(a, wa)], exact=True):
                failures.append(f"{name} {[str(p) for p in placements]}")
    return failures


def test_views_cat_and_stack_by_their_rules():
    assert dist.sim.run(4, _views_everywhere) == [[]] * 4


def _nn_everywhere(rank):
    """layer_norm over the last dimension (weight and bias whole) and embedding with the table whole, split by
    rows or by columns, on every placement, against the plain ops on whole tensors, with gradients."""
    from minidl.nn import functional as F
    failures = []
    mesh = _mesh()
    kinds = list(itertools.product([Shard(0), Shard(1), Replicate()], repeat=mesh.ndim))
    gamma, beta = np.random.RandomState(10).randn(6), np.random.RandomState(11).randn(6)
    for placements in kinds:
        a = distribute_tensor(minidl.tensor(A), mesh, placements).requires_grad_()
        g = distribute_tensor(minidl.tensor(gamma), mesh, (Replicate(),) * mesh.ndim).requires_grad_()
        b = distribute_tensor(minidl.tensor(beta), mesh, (Replicate(),) * mesh.ndim).requires_grad_()
        wa, wg, wb = (minidl.tensor(v).requires_grad_() for v in (A, gamma, beta))
        if not agrees(F.layer_norm(a, (6,), g, b), F.layer_norm(wa, (6,), wg, wb), [(a, wa), (g, wg), (b, wb)]):
            failures.append(f"layer_norm {[str(p) for p in placements]}")
    ids = np.array([[0, 3, 6], [2, 2, 5]])
    table = np.random.RandomState(12).randn(7, 4)
    id_kinds = list(itertools.product([Shard(0), Shard(1), Replicate()], repeat=mesh.ndim))
    for pi, pw in itertools.product(id_kinds, kinds):
        d_ids = distribute_tensor(minidl.tensor(ids), mesh, pi)
        d_table = distribute_tensor(minidl.tensor(table), mesh, pw).requires_grad_()
        w_table = minidl.tensor(table).requires_grad_()
        if not agrees(F.embedding(d_ids, d_table), F.embedding(minidl.tensor(ids), w_table), [(d_table, w_table)]):
            failures.append(f"embedding ids {[str(p) for p in pi]} table {[str(p) for p in pw]}")
    return failures


def test_layer_norm_and_embedding_by_their_rules():
    assert dist.sim.run(4, _nn_everywhere) == [[]] * 4
    assert dist.sim.run(2, _nn_everywhere) == [[]] * 2


def _cross_entropy_everywhere(rank):
    """F.cross_entropy and F.nll_loss (mean, sum, none; class weights; an ignored row; label smoothing) with the
    rows and the classes split every way, against the plain function on whole tensors, with gradients."""
    from minidl.nn import functional as F
    failures = []
    mesh = _mesh()
    kinds = list(itertools.product([Shard(0), Shard(1), Replicate()], repeat=mesh.ndim))
    X, T = np.random.RandomState(13).randn(5, 4), np.array([2, 0, -100, 3, 1])
    weight = np.array([0.5, 1.0, 2.0, 1.5])
    whole_mesh = (Replicate(),) * mesh.ndim
    for placements in kinds:
        for options in (dict(), dict(reduction="sum"), dict(reduction="none"), dict(weight=True),
                        dict(label_smoothing=0.2)):
            for loss in (F.cross_entropy, F.nll_loss):
                if loss is F.nll_loss and "label_smoothing" in options:
                    continue
                x = distribute_tensor(minidl.tensor(X), mesh, placements).requires_grad_()
                targets = distribute_tensor(minidl.tensor(T), mesh, tuple(p if p == Shard(0) else Replicate()
                                                                          for p in placements))
                wx = minidl.tensor(X).requires_grad_()
                kw = dict(options)
                if kw.pop("weight", False):
                    kw["weight"] = distribute_tensor(minidl.tensor(weight), mesh, whole_mesh)
                want = loss(wx, minidl.tensor(T), **{k: (minidl.tensor(weight) if k == "weight" else v)
                                                     for k, v in kw.items()})
                if not agrees(loss(x, targets, **kw), want, [(x, wx)]):
                    failures.append(f"{loss.__name__} {options} {[str(p) for p in placements]}")
    return failures


def test_cross_entropy_by_its_rule():
    assert dist.sim.run(4, _cross_entropy_everywhere) == [[]] * 4



def _batched_matmul_everywhere(rank):
    """bmm and matmul of batches (3, 4, 5) @ (3, 5, 2) for every placement pair, against numpy, with gradients."""
    failures = []
    mesh = _mesh()
    P, Q, G = (np.random.RandomState(s).randn(*shape) for s, shape in ((20, (3, 4, 5)), (21, (3, 5, 2)),
                                                                        (22, (3, 4, 2))))
    kinds = list(itertools.product([Shard(0), Shard(1), Shard(2), Replicate()], repeat=mesh.ndim))
    for pa, pb in itertools.product(kinds, repeat=2):
        for op in (minidl.bmm, minidl.matmul) if mesh.ndim == 1 else (minidl.matmul,):   # (one rule: bmm's once)
            a = distribute_tensor(minidl.tensor(P), mesh, pa).requires_grad_()
            b = distribute_tensor(minidl.tensor(Q), mesh, pb).requires_grad_()
            c = op(a, b)
            (c.full_tensor() * minidl.tensor(G)).sum().backward()
            if not (np.allclose(c.full_tensor().detach().numpy(), P @ Q, rtol=0, atol=1e-12)
                    and np.allclose(a.grad.full_tensor().numpy(), G @ Q.transpose(0, 2, 1), rtol=0, atol=1e-12)
                    and np.allclose(b.grad.full_tensor().numpy(), P.transpose(0, 2, 1) @ G, rtol=0, atol=1e-12)):
                failures.append(f"{op.__name__} {[str(p) for p in pa]} {[str(p) for p in pb]}")
    return failures


def test_batched_matmul_by_its_rule():
    assert dist.sim.run(2, _batched_matmul_everywhere) == [[]] * 2
    assert dist.sim.run(4, _batched_matmul_everywhere) == [[]] * 4


def _attention_everywhere(rank):
    """scaled_dot_product_attention (causal and not) on (2, 4, 3, 5) query, key and value, split over batch or
    heads or gathered, against the plain function on whole tensors, with gradients of all three."""
    from minidl.nn import functional as F
    failures = []
    mesh = _mesh()
    Q, K, V = (np.random.RandomState(s).randn(2, 4, 3, 5) for s in (30, 31, 32))
    kinds = list(itertools.product([Shard(0), Shard(1), Shard(2), Replicate()], repeat=mesh.ndim))
    for placements in kinds:
        for causal in (False, True):
            ds = [distribute_tensor(minidl.tensor(v), mesh, placements).requires_grad_() for v in (Q, K, V)]
            ws = [minidl.tensor(v).requires_grad_() for v in (Q, K, V)]
            if not agrees(F.scaled_dot_product_attention(*ds, is_causal=causal),
                          F.scaled_dot_product_attention(*ws, is_causal=causal), list(zip(ds, ws))):
                failures.append(f"attention causal={causal} {[str(p) for p in placements]}")
    return failures


def test_attention_by_its_rule_over_heads():
    assert dist.sim.run(4, _attention_everywhere) == [[]] * 4


def _dropout_everywhere(rank):
    """With every rank seeded alike, dropout of a DTensor, for every placement, is the single process's
    dropout of the whole tensor (same seed), and so is the gradient; twice in a row (the generators stay
    together)."""
    from minidl.nn import functional as F
    failures = []
    mesh = _mesh()
    for placements in itertools.product([Shard(0), Shard(1), Replicate()], repeat=mesh.ndim):
        minidl.manual_seed(7)
        a = distribute_tensor(minidl.tensor(A), mesh, placements).requires_grad_()
        got = [F.dropout(a, 0.4) for _ in range(2)]
        minidl.manual_seed(7)
        whole = minidl.tensor(A).requires_grad_()
        want = [F.dropout(whole, 0.4) for _ in range(2)]
        w = minidl.tensor(np.random.RandomState(5).randn(5, 6))
        sum((g.full_tensor() * w).sum() for g in got).backward()
        sum((x * w).sum() for x in want).backward()
        if not (all(np.array_equal(g.full_tensor().detach().numpy(), x.detach().numpy()) for g, x in zip(got, want))
                and np.allclose(a.grad.full_tensor().numpy(), whole.grad.numpy(), rtol=0, atol=1e-13)):
            failures.append(f"dropout {[str(p) for p in placements]}")
    return failures


def test_dropout_by_its_rule_is_the_single_process_dropout():
    assert dist.sim.run(4, _dropout_everywhere) == [[]] * 4


def _backward_from_a_dtensor(rank):
    """loss.backward() on a DTensor loss (a partial sum here, an average, or whole) and out.backward(gradient)
    with a split gradient: the gradients of the whole-tensor computation, lying as the leaves do."""
    mesh = init_device_mesh("cpu", (2,))
    failures = []
    for reduce in ("sum", "mean"):
        a = distribute_tensor(minidl.tensor(A), mesh, [Shard(0)]).requires_grad_()
        b = distribute_tensor(minidl.tensor(B), mesh, [Replicate()]).requires_grad_()
        getattr(a @ b, reduce)().backward()
        ones = np.ones((5, 3)) / (15 if reduce == "mean" else 1)
        if not (np.allclose(a.grad.full_tensor().numpy(), ones @ B.T, atol=1e-12)
                and np.allclose(b.grad.full_tensor().numpy(), A.T @ ones, atol=1e-12)
                and a.grad.placements == (Shard(0),) and b.grad.placements == (Replicate(),)):
            failures.append(reduce)
    a = distribute_tensor(minidl.tensor(A), mesh, [Replicate()]).requires_grad_()
    (a * 2).backward(distribute_tensor(minidl.tensor(A), mesh, [Shard(1)]))
    if not np.allclose(a.grad.full_tensor().numpy(), 2 * A, atol=1e-12):
        failures.append("gradient")
    return failures


def test_backward_from_a_dtensor():
    assert dist.sim.run(2, _backward_from_a_dtensor) == [[]] * 2
