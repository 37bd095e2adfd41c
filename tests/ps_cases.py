"""Parameter-server cases shared by the sim tests and the mpiexec script: each runs one ps.init ...
ps.shutdown on every rank and returns failure strings (servers return none).

The spec: under BSP with plain SGD the workers end with the parameters of synchronous SGD on the
summed gradients (float64, 1e-10), which every worker computes itself; under SSP no applied push
is staler than s and the fast workers reach s, read from the servers' records; under ASP the fast
workers finish every round before the slow one starts; sparse pushes touch only their rows.
"""
import time

import numpy as np

import minidl
from minidl.dist import ps

STEPS, LR = 4, 0.1


def data(worker, step):
    rs = np.random.RandomState(100 * step + worker)
    return minidl.from_numpy(rs.randn(6, 4)), minidl.from_numpy(rs.randn(6, 3)), minidl.tensor(rs.randint(0, 12, 5))


def gradients(w, table, worker, step):
    """Of a least-squares loss in w (4 x 3) and a row-sum loss in the looked-up table rows."""
    x, y, rows = data(worker, step)
    gw = x.t() @ (x @ w - y) / 6
    return gw, rows, table[rows] * 2.0


def start():
    w0 = minidl.from_numpy(np.random.RandomState(7).randn(4, 3))
    table0 = minidl.from_numpy(np.random.RandomState(8).randn(12, 2))
    return w0, table0


def case_bsp_is_synchronous_sgd(rank, size, servers):
    if ps.init(num_servers=servers, consistency="bsp") == "server":
        return []
    workers = ps.num_workers()
    w0, table0 = start()
    ps.register("w", w0, optimizer=ps.SGD(lr=LR))
    ps.register("table", table0, optimizer=ps.SGD(lr=LR), sparse=True)
    for step in range(STEPS):
        if rank == 1:
            time.sleep(0.01)   # (pulls late: the others' pushes of this iteration must not show yet)
        w, table = ps.pull("w"), ps.pull("table")
        gw, rows, gt = gradients(w, table, rank, step)
        ps.push("w", gw)
        ps.push("table", gt, rows=rows)
        ps.clock()
    got_w, got_table = ps.pull("w"), ps.pull("table")
    counts = ps.stats()
    ps.shutdown()
    w, table = w0.clone(), table0.clone()   # the reference: every worker's gradients summed per step
    for step in range(STEPS):
        grads = [gradients(w, table, k, step) for k in range(workers)]
        w = w - LR * sum(g[0] for g in grads)
        update = minidl.zeros_like(table)
        for _, rows, gt in grads:
            update.index_add_(0, rows, gt)
        table = table - LR * update
    failures = []
    if not np.allclose(got_w.numpy(), w.numpy(), rtol=1e-10, atol=1e-12):
        failures.append(f"BSP ({servers} servers): w differs from synchronous SGD by "
                        f"{np.abs(got_w.numpy() - w.numpy()).max():.3g}")
    if not np.allclose(got_table.numpy(), table.numpy(), rtol=1e-10, atol=1e-12):
        failures.append(f"BSP ({servers} servers): the table differs from synchronous SGD")
    if counts["pushes"] < workers * STEPS * servers:   # (a dense push counts on every server)
        failures.append(f"BSP: {counts['pushes']} pushes applied, fewer than the {workers * STEPS * servers} "
                        f"dense ones")
    return failures


def case_ssp_and_asp_with_a_slow_worker(rank, size, servers, consistency, staleness=1, rounds=6):
    """Worker 0 is slow by construction: before each of its rounds it waits until the servers have
    applied as many of the fast workers' pushes as the consistency lets them make (under ASP all of
    them before its first round; under SSP those up to ``staleness`` rounds ahead of it), so the
    fast workers must run ahead without waiting for it, and (under SSP) reach the bound, never pass it."""
    if ps.init(num_servers=servers, consistency=consistency, staleness=staleness) == "server":
        return []
    ps.register("w", minidl.zeros(8), optimizer=ps.SGD(lr=0.01))
    failures = []
    fast = ps.num_workers() - 1
    for step in range(rounds):
        if rank == 0:
            ahead = rounds if consistency == "asp" else min(rounds, step + staleness + 1)
            failures += _wait_for_pushes(fast * ahead * servers,   # (a dense push counts on every server)
                                         f"{consistency.upper()}: the fast workers' pushes of {ahead} rounds")
        ps.pull("w")
        ps.push("w", minidl.ones(8))
        ps.clock()
    counts = ps.stats() if rank == 0 else None
    ps.shutdown()
    if consistency == "ssp" and rank == 0 and max(counts["staleness"]) != staleness:
        failures.append(f"SSP({staleness}): the stalest push was {max(counts['staleness'])} clocks stale "
                        f"(the fast workers should reach the bound, never pass it): {counts['staleness']}")
    if consistency == "asp" and rank == 0 and fast and max(counts["staleness"]) != rounds - 1:
        failures.append(f"ASP: the stalest push was {max(counts['staleness'])} clocks stale, where the fast "
                        f"workers ran all {rounds} rounds ahead of the slow one: {counts['staleness']}")
    return failures


def _wait_for_pushes(count, what, patience=60.0):
    """Poll the servers until they applied ``count`` pushes; a failure after ``patience`` seconds
    (a liveness bound only: the fast workers are stuck, which is the failure)."""
    deadline = time.monotonic() + patience
    while ps.stats()["pushes"] < count:
        if time.monotonic() > deadline:
            return [f"{what} never arrived ({ps.stats()['pushes']} of {count} pushes applied)"]
        time.sleep(0.001)
    return []


def case_sparse_rows_and_embeddings(rank, size, servers):
    if ps.init(num_servers=servers, consistency="bsp") == "server":
        return []
    ps.register_embedding("emb", 9, 3, optimizer=ps.Adam(lr=0.1), init_std=0.5, seed=11)
    ps.register("mom", minidl.zeros(9, 3), optimizer=ps.SGD(lr=0.1, momentum=0.9), sparse=True)
    whole = minidl.empty(9, 3).normal_(0.0, 0.5, generator=minidl.Generator().manual_seed(11))
    first = ps.pull("emb")
    pushed = minidl.tensor([1, 7])
    if rank == 0:
        grad = minidl.sparse_coo_tensor(pushed.unsqueeze(0), minidl.ones(2, 3), (9, 3))
        ps.push("emb", grad).wait()
        ps.push("mom", grad)
    ps.clock()
    after, momentum_after = ps.pull("emb"), ps.pull("mom")
    picked = ps.pull("emb", minidl.tensor([7, 0, 7]))
    if rank == 0:   # a second push to another row leaves rows 1 and 7, and their optimizer state, alone
        ps.push("emb", minidl.ones(1, 3), rows=minidl.tensor([2]))
        ps.push("mom", minidl.ones(1, 3), rows=minidl.tensor([2]))
    ps.clock()
    later, momentum_later = ps.pull("emb"), ps.pull("mom")
    ps.shutdown()
    failures = []
    if not np.array_equal(first.numpy(), whole.numpy()):
        failures.append(f"embedding on {servers} servers: initial rows differ from the whole table's draw")
    untouched = [r for r in range(9) if r not in (1, 7)]
    if not np.array_equal(after.numpy()[untouched], first.numpy()[untouched]):
        failures.append("a sparse push changed rows it did not hold")
    if np.allclose(after.numpy()[[1, 7]], first.numpy()[[1, 7]]):
        failures.append("a sparse push left its rows unchanged")
    if not np.array_equal(picked.numpy(), after.numpy()[[7, 0, 7]]):
        failures.append("pull by rows returned other rows than pull of all")
    if not (np.array_equal(later.numpy()[[1, 7]], after.numpy()[[1, 7]])
            and np.array_equal(momentum_later.numpy()[[1, 7]], momentum_after.numpy()[[1, 7]])):
        failures.append("a push to row 2 moved rows 1 and 7 (not lazy: Adam's or momentum's state of other rows)")
    if not np.allclose(momentum_after.numpy()[[1, 7]], -0.1):
        failures.append(f"momentum SGD's first step on a row is not -lr * g: {momentum_after.numpy()[[1, 7]]}")
    return failures


def case_downpour_module(rank, size, push_every, hybrid=False, adam=False, servers=1):
    """ps.DistributedModel under BSP: a sparse embedding + linear model equals synchronous training
    on every worker's gradients averaged, with pushes every ``push_every`` steps (gradients
    accumulated in between); with SGD on the servers, or with Adam (the servers sum an
    iteration's pushes and take one step). Hybrid: the linear layer replicated instead (its
    gradients averaged by all-reduce and stepped by a local optimizer of the same kind). The first
    step looks up rows of the first half of the table only: on 2 servers, Adam's step count must
    still be the table's on both."""
    if ps.init(num_servers=servers, consistency="bsp") == "server":
        return []
    workers = ps.num_workers()

    def net():
        rs = np.random.RandomState(5)
        m = minidl.nn.Sequential(minidl.nn.Embedding(12, 3, sparse=True), minidl.nn.Flatten(),
                                 minidl.nn.Linear(6, 1)).double()
        with minidl.no_grad():
            for p in m.parameters():
                p.copy_(minidl.from_numpy(rs.randn(*p.shape)))
        return m

    def batch(worker, step):
        rs = np.random.RandomState(1000 + 10 * step + worker)
        return minidl.tensor(rs.randint(0, 6 if step == 0 else 12, size=(4, 2))), minidl.from_numpy(rs.randn(4, 1))

    def local_optimizer(params):
        return minidl.optim.Adam(params, lr=LR) if adam else minidl.optim.SGD(params, lr=LR)
    local = net()
    if hybrid and rank != 0:   # (replicas that start apart: the model must take worker 0's values)
        with minidl.no_grad():
            local[2].weight.add_(1.0)
    model = ps.DistributedModel(local, optimizer=ps.Adam(lr=LR) if adam else ps.SGD(lr=LR), push_every=push_every,
                                hybrid=hybrid, dense_optimizer=local_optimizer if hybrid else None)
    steps = 2 * push_every
    for step in range(steps):
        x, y = batch(rank, step)
        ((model(x) - y) ** 2).mean().backward()
        model.step()
    final = [ps.pull("0.weight")] + ([local[2].weight.detach(), local[2].bias.detach()] if hybrid else
                                     [ps.pull(name) for name in ("2.weight", "2.bias")])
    ps.shutdown()
    ref = net()
    optimizers = [minidl.optim.SparseAdam([ref[0].weight], lr=LR) if adam else minidl.optim.SGD([ref[0].weight], lr=LR),
                  local_optimizer(ref[2].parameters())]
    for start in range(0, steps, push_every):   # one synchronous step per push: every worker's batches
        for step in range(start, start + push_every):
            for worker in range(workers):
                x, y = batch(worker, step)
                (((ref(x) - y) ** 2).mean() / workers).backward()
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
    want = [ref[0].weight, ref[2].weight, ref[2].bias]
    if not all(np.allclose(a.numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12) for a, b in zip(final, want)):
        return [f"DistributedModel (push_every={push_every}, hybrid={hybrid}, adam={adam}, servers={servers}): "
                f"differs from synchronous training"]
    return []


def case_downpour_learns_under(rank, size, consistency):
    """ps.DistributedModel under SSP(1) or ASP: every worker fits the same least-squares problem
    through a shared linear layer; the loss falls well below its start."""
    if ps.init(num_servers=1, consistency=consistency, staleness=1) == "server":
        return []
    layer = minidl.nn.Linear(4, 3, bias=False).double()
    with minidl.no_grad():   # (every worker the same start: the servers refuse different ones)
        layer.weight.copy_(minidl.from_numpy(np.random.RandomState(3).randn(3, 4)))
    model = ps.DistributedModel(layer, optimizer=ps.SGD(lr=LR))
    losses = []
    for step in range(30):
        x = data(rank, step % 3)[0]
        y = x @ minidl.from_numpy(np.random.RandomState(9).randn(4, 3))   # (a target the layer can reach)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        model.step()
        losses.append(loss.item())
    ps.shutdown()
    if not losses[-1] < 0.1 * losses[0]:
        return [f"DistributedModel under {consistency}: loss {losses[0]:.3g} -> {losses[-1]:.3g}"]
    return []


def run_all(rank, size):
    failures = []
    for servers in sorted({1, size - 2} - {0}):
        failures += case_bsp_is_synchronous_sgd(rank, size, servers)
        failures += case_sparse_rows_and_embeddings(rank, size, servers)
    for consistency in ("ssp", "asp"):
        failures += case_ssp_and_asp_with_a_slow_worker(rank, size, 1, consistency)
    for push_every in (1, 2):
        failures += case_downpour_module(rank, size, push_every)
    failures += case_downpour_module(rank, size, 2, hybrid=True)
    failures += case_downpour_module(rank, size, 1, adam=True)
    failures += case_downpour_module(rank, size, 1, hybrid=True, adam=True)
    if size >= 4:
        failures += case_downpour_module(rank, size, 1, adam=True, servers=2)
    for consistency in ("ssp", "asp"):
        failures += case_downpour_learns_under(rank, size, consistency)
    return failures
