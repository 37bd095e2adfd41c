"""Tutorial 8: a parameter server from scratch, then BSP, SSP and ASP with a slow worker.

Run it:  python tutorials/08_parameter_server.py

Data parallelism with all-reduce (tutorials 5 and 6) keeps every rank in lock-step: a step ends
only when the slowest rank's gradient is in. A **parameter server** (DistBelief's Downpour SGD,
ps-lite, the big embedding systems) splits the ranks into two roles instead: *servers* hold the
parameters, *workers* ``pull`` them, compute a gradient on their own data and ``push`` it back,
and the server applies each push as it arrives. Nobody has to wait for anybody, unless we ask
them to: how much a fast worker may run ahead of a slow one is the **consistency model**. Here the
ranks are threads of this process (``minidl.dist.sim``); under ``mpiexec -n N`` the same code runs
one process per rank.

1. **From scratch.** A server loop in about 40 lines on ``minidl.dist``'s point-to-point layer:
   requests from any worker (``recv(src=None)`` returns who sent it), a two-word header whose
   first word is an op code (pull, push, stop), and ``w -= lr * g`` per push. When the workers
   take turns it is exactly sequential SGD; left to run freely, each gradient is computed on
   parameters a few updates old: its **staleness**.
2. **minidl.dist.ps.** The real thing adds what a production server needs: parameters under
   names (keys) cut across several servers, a **clock** per worker (``ps.clock()`` ends an
   iteration) that the consistency rule is checked against, and an optimizer *on the server*
   (SGD, Adagrad, Adam), so that workers send only gradients. Under BSP it is synchronous SGD on
   the summed gradients, checked to 1e-10 in float64.
3. **BSP, SSP, ASP.** With one worker deliberately slow: BSP (bulk synchronous) makes everyone
   wait for it every iteration, SSP(s) (stale synchronous) lets the others run up to s clocks
   ahead, ASP (asynchronous) never waits. We time the workers and draw each model's histogram of
   staleness, as the servers recorded it for every push they applied.
4. **A row-sharded embedding table** on two servers: a sparse gradient touches only its rows,
   and only the servers that hold them.
5. **A whole module** through the servers (``ps.DistributedModel``, Downpour SGD), and Hetu's
   hybrid mode: embeddings on the servers, dense layers replicated and all-reduced.
6. **Failures.** Why a worker's loss is easy to survive and a server's is not; a worker that dies
   mid-run is dropped from the clock, one that joins (``ps.join``) starts at the slowest clock,
   every push is applied exactly once (sequence numbers), and a frozen worker's stale pushes are
   dropped (``drop_stale_after``). A measured timeline of each worker's steps shows the death and
   the join.
7. **A server dies** in a real job of 3 processes: SIGKILLed mid-run, restarted from its checkpoint
   and write-ahead log (``python -m minidl.dist.ps --resume``) while the workers wait; the result is
   the uninterrupted run's.

The pictures are written to ``$MINIDL_TUTORIAL_OUT`` if set, else to a fresh temporary
directory. Every claim is checked with ``assert``.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

import minidl
import minidl.dist as dist
from minidl.dist import ps
from minidl.dist.ps.sharding import bounds

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()

matplotlib.use("Agg")   # (draw to a file; no display needed)
import matplotlib.pyplot as plt  # noqa: E402

began = time.perf_counter()
DIM, BATCH, LR = 8, 16, 0.05
W_TRUE = np.random.RandomState(0).randn(DIM)


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def data(worker, step):
    """Worker ``worker``'s batch at ``step`` of a least-squares problem y = x @ W_TRUE + noise (from
    numpy: sim ranks are threads sharing minidl's generator)."""
    rs = np.random.RandomState([worker, step])
    x = rs.randn(BATCH, DIM)
    return x, x @ W_TRUE + 0.1 * rs.randn(BATCH)


def gradient(w, worker, step):
    """The gradient of 0.5 * mean((x @ w - y)^2) in w, a float64 minidl tensor."""
    x, y = (minidl.from_numpy(a) for a in data(worker, step))
    return x.t() @ (x @ w - y) / BATCH


def numpy_gradient(w, worker, step):
    x, y = data(worker, step)
    return x.T @ (x @ w - y) / BATCH


def loss(w):
    x, y = data(999, 0)
    return float(0.5 * np.mean((x @ w - y) ** 2))


# =============================================================================================
# 1. A parameter server from scratch: one server rank (the last), the rest workers
# =============================================================================================
PULL, PUSH, STOP = 0, 1, 2                    # op codes: word 0 of a request's header
REQUEST, PAYLOAD, REPLY, TOKEN = 1, 2, 3, 4   # tags: each kind of message on its own


def toy_server(workers, w0, lr):
    """Hold w; answer pulls with (version, w); apply each push as it comes. Returns w and the
    staleness of each push: how many updates were applied between its pull and itself."""
    w, grad = minidl.from_numpy(w0.copy()), minidl.empty(DIM, dtype=minidl.float64)
    header = minidl.empty(2, dtype=minidl.int64)
    version, staleness, running = 0, Counter(), workers
    while running:
        worker = dist.recv(header, src=None, tag=REQUEST)   # whoever asks first
        op, seen = header.tolist()
        if op == PULL:
            dist.send(minidl.tensor([version]), worker, tag=REPLY)
            dist.send(w, worker, tag=REPLY)
        elif op == PUSH:                                     # its payload follows, on its own tag
            dist.recv(grad, worker, tag=PAYLOAD)
            w.sub_(grad, alpha=lr)
            staleness[version - seen] += 1                  # seen: the version it pulled
            version += 1
            dist.send(minidl.tensor([version]), worker, tag=REPLY)   # applied
        else:
            running -= 1
    return w.numpy(), staleness


def toy_worker(rank, workers, steps, turns):
    server = workers
    w, version = minidl.empty(DIM, dtype=minidl.float64), minidl.empty(1, dtype=minidl.int64)
    token = minidl.empty(1, dtype=minidl.int64)
    for step in range(steps):
        if turns and (rank, step) != (0, 0):
            dist.recv(token, (rank - 1) % workers, tag=TOKEN)    # wait for my turn
        dist.send(minidl.tensor([PULL, 0]), server, tag=REQUEST)
        dist.recv(version, server, tag=REPLY)
        dist.recv(w, server, tag=REPLY)
        dist.send(minidl.tensor([PUSH, int(version)]), server, tag=REQUEST)
        dist.send(gradient(w, rank, step), server, tag=PAYLOAD)
        dist.recv(version, server, tag=REPLY)                   # wait until it is applied
        if turns and (rank, step) != (workers - 1, steps - 1):
            dist.send(token, (rank + 1) % workers, tag=TOKEN)    # the next worker's turn
    dist.send(minidl.tensor([STOP, 0]), server, tag=REQUEST)


def toy(rank, workers, steps, w0, turns):
    return toy_server(workers, w0, LR) if rank == workers else toy_worker(rank, workers, steps, turns)


# ---------------------------------------------------------------------------------------------
section("1. A parameter server from scratch: workers taking turns = sequential SGD")
WORKERS, STEPS = 3, 20
w0 = np.zeros(DIM)
w_turns, stale_turns = dist.sim.run(WORKERS + 1, toy, WORKERS, STEPS, w0, True)[WORKERS]
sequential = w0.copy()
for step in range(STEPS):
    for k in range(WORKERS):        # the order the token goes round: worker 0, 1, 2, 0, 1, ...
        sequential -= LR * numpy_gradient(sequential, k, step)
print(f"{WORKERS} workers, {STEPS} steps each, the token passed round: the server applied "
      f"{sum(stale_turns.values())} pushes, staleness {dict(stale_turns)}")
print(f"largest difference from sequential SGD in numpy: {np.abs(w_turns - sequential).max():.1e}")
assert np.allclose(w_turns, sequential, rtol=1e-10, atol=1e-12)
assert stale_turns == {0: WORKERS * STEPS}   # each gradient was computed on the latest w
print("Equal: one server applying pushes one at a time, with each worker pulling just before it\n"
      "pushes, is plain SGD over the workers' batches in turn.")

# ---------------------------------------------------------------------------------------------
section("1b. The same server, the workers left to run freely: asynchronous SGD")
w_free, stale_free = dist.sim.run(WORKERS + 1, toy, WORKERS, STEPS, w0, False)[WORKERS]
print(f"staleness of the {sum(stale_free.values())} pushes (updates between a push's pull and "
      f"itself): {dict(sorted(stale_free.items()))}")
print(f"difference from sequential SGD: {np.abs(w_free - sequential).max():.1e} (it depends on how the "
      f"threads were scheduled)")
print(f"loss: {loss(w0):.3f} at the start, {loss(sequential):.4f} sequential, {loss(w_free):.4f} asynchronous")
assert sum(stale_free.values()) == WORKERS * STEPS and min(stale_free) >= 0
assert loss(w_free) < 0.1 * loss(w0)      # stale gradients, still descending
print("""
No worker waited for another (only for the server's answers), and SGD still converged, but each
gradient may be computed on a w that misses some of the others' updates. What the toy lacks, and
real servers have:
  * keys and shards: many named parameters, each cut across several servers, so that no one
    server's link or memory carries all of them (a big embedding table is sharded by row);
  * clocks: each worker says when it ends an iteration, so the server can bound how far ahead
    of the slowest worker anyone runs (BSP, SSP) instead of leaving it to the scheduler;
  * a server-side optimizer (Adagrad made Downpour SGD stable): the server keeps the optimizer's
    state next to its shard, and workers send gradients only.""")

# =============================================================================================
section("2. minidl.dist.ps: under BSP, synchronous SGD on the summed gradients")
# =============================================================================================
# ps.init makes the last ``num_servers`` ranks servers: on a server it serves until every worker
# has called ps.shutdown(), then returns "server"; on a worker it returns "worker" at once.


def bsp_training(rank, servers, steps):
    if ps.init(num_servers=servers, consistency="bsp") == "server":
        return None
    ps.register("w", minidl.from_numpy(w0.copy()), optimizer=ps.SGD(lr=LR))  # every worker, same order
    for step in range(steps):
        w = ps.pull("w")                              # sees every push of the iterations before
        ps.push("w", gradient(w, ps.worker_rank(), step))   # asynchronous: returns a Work
        ps.clock()                                    # the end of my iteration
    w = ps.pull("w")
    dist.barrier(group=ps.worker_group())             # (the workers' own group: everyone is done)
    counts = ps.stats()
    ps.shutdown()
    return w.numpy(), counts


synchronous = w0.copy()
for step in range(STEPS):
    synchronous -= LR * sum(numpy_gradient(synchronous, k, step) for k in range(WORKERS))
for servers in (1, 2):
    results = dist.sim.run(WORKERS + servers, bsp_training, servers, STEPS)
    for w, counts in results[:WORKERS]:
        assert np.allclose(w, synchronous, rtol=1e-10, atol=1e-12)
    counts = results[0][1]
    print(f"{servers} server(s): every worker ends {np.abs(results[0][0] - synchronous).max():.1e} from "
          f"synchronous SGD; stats {counts}")
    # a dense parameter is cut by element over the servers: each push is applied by each of them
    assert counts["pushes"] == WORKERS * STEPS * servers and counts["staleness"] == {0: WORKERS * STEPS * servers}
    assert counts["rejected"] == 0
print(f"""
BSP: a pull during iteration c sees exactly the pushes of iterations before c, so each iteration
applies all {WORKERS} workers' gradients of the same w: w -= lr * (g_0 + g_1 + g_2), data-parallel SGD
with the gradients summed (tutorial 6 averages them; scale lr to match, or let
ps.DistributedModel average them). The server adds the pushes up in arrival order, so the sum's
rounding can differ in the last bits: 1e-10, not equality. It applies the sum as one step of the
parameter's optimizer, so with ps.Adagrad or ps.Adam too BSP is synchronous training.
Sequential SGD (section 1) is another algorithm: it ends {np.abs(sequential - synchronous).max():.2f} away.""")

# =============================================================================================
section("3. BSP, SSP and ASP with a slow worker")
# =============================================================================================
SLOW, ITERS, WORKERS3 = 0.025, 8, 4     # worker 0 sleeps SLOW seconds per iteration


def with_a_slow_worker(rank, consistency, staleness):
    if ps.init(num_servers=1, consistency=consistency, staleness=staleness) == "server":
        return None
    ps.register("w", minidl.from_numpy(w0.copy()), optimizer=ps.SGD(lr=0.01))
    dist.barrier(group=ps.worker_group())      # start the watches together
    start = time.perf_counter()
    for step in range(ITERS):
        if rank == 0:
            time.sleep(SLOW)                   # the straggler: a slower machine, a busier GPU, ...
        w = ps.pull("w")
        pushed = ps.push("w", gradient(w, rank, step))
        ps.clock()                             # BSP and SSP may wait here; ASP never does
    pushed.wait()                              # (the server answers a worker's requests in order)
    took = time.perf_counter() - start
    dist.barrier(group=ps.worker_group())
    counts = ps.stats() if rank == 0 else None
    ps.shutdown()
    return took, counts


MODELS = [("BSP", "bsp", 0), ("SSP(1)", "ssp", 1), ("SSP(3)", "ssp", 3), ("ASP", "asp", 0)]
histograms, times = {}, {}
print(f"{WORKERS3} workers and one server; worker 0 sleeps {SLOW * 1e3:.0f} ms in each of {ITERS} iterations, "
      f"the others not at all.\n")
print(f"{'model':8} {'slow worker':>12} {'fast workers (slowest of them)':>32}   staleness of the applied pushes")
for label, consistency, s in MODELS:
    results = dist.sim.run(WORKERS3 + 1, with_a_slow_worker, consistency, s)
    slow, fast = results[0][0], max(took for took, _ in results[1:WORKERS3])
    hist = histograms[label] = dict(sorted(results[0][1]["staleness"].items()))
    times[label] = slow, fast
    print(f"{label:8} {slow * 1e3:>9.0f} ms {fast * 1e3:>29.0f} ms   {hist}")
    assert sum(hist.values()) == WORKERS3 * ITERS       # every push applied, and recorded once
    assert slow >= ITERS * SLOW
    if consistency == "bsp":
        # no push staler than 0, and a fast worker's last clock waits for the slow one's last
        assert set(hist) == {0} and fast >= (ITERS - 1) * SLOW
    elif consistency == "ssp":
        # no push staler than s; a fast worker ends at most s clocks ahead of the slow one
        assert max(hist) <= s and fast >= (ITERS - s - 1) * SLOW
    else:
        # nobody waits: the fast workers run clocks ahead of the slow one (how much sooner they finish is
        # printed, not asserted: on a busy machine the clock says little)
        assert max(hist) > 1
assert max(histograms["ASP"]) > max(histograms["SSP(1)"])
print("""
BSP has every worker wait for the slowest at each clock: all pushes 0 clocks stale, and the fast
workers take as long as the slow one. SSP(s) lets them run up to s clocks ahead, so they finish
about s iterations' sleep earlier and their pushes are up to s clocks stale. ASP never waits: the
fast workers are done while the slow one is still at its first clocks, and the staleness has no
bound but the iteration count. (Staleness here counts clocks, not updates as in section 1: how
many of the slowest unfinished worker's iterations the pushing worker was ahead of it.)""")

out_dir = os.environ.get("MINIDL_TUTORIAL_OUT") or tempfile.mkdtemp(prefix="minidl-tutorial-08-")
top = max(max(h) for h in histograms.values())
fig, axes = plt.subplots(1, len(MODELS), figsize=(3.2 * len(MODELS), 3), sharey=True)
for ax, (label, _, _) in zip(axes, MODELS):
    hist = histograms[label]
    ax.bar(range(top + 1), [hist.get(k, 0) for k in range(top + 1)], color="tab:blue")
    ax.set_title(f"{label}: fast workers {times[label][1] * 1e3:.0f} ms,\nslow one {times[label][0] * 1e3:.0f} ms",
                 fontsize=10)
    ax.set_xlabel("staleness (clocks)")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))   # (readable however stale)
axes[0].set_ylabel("pushes applied")
fig.suptitle(f"{WORKERS3} workers, worker 0 slowed by {SLOW * 1e3:.0f} ms per iteration")
fig.tight_layout()
path = os.path.join(out_dir, "staleness.png")
fig.savefig(path, dpi=100)
plt.close(fig)
assert os.path.getsize(path) > 0
print(f"\nthe four histograms side by side: {path}")

# =============================================================================================
section("4. A row-sharded embedding table on two servers")
# =============================================================================================
ROWS, EMB = 10, 4


def embedding(rank, servers):
    if ps.init(num_servers=servers, consistency="bsp") == "server":
        return None
    # made on the servers, N(0, 0.5): row by row the same draw whatever the number of servers
    ps.register_embedding("emb", ROWS, EMB, optimizer=ps.Adagrad(lr=0.1), init_std=0.5, seed=3)
    first = ps.pull("emb")
    applied = []    # how many pushes the servers applied in each iteration (a push to two servers: 2)
    for rows in ([1, 3], [2, 8]):   # both on server 0, then one row on each server
        before = ps.stats()["pushes"]
        if rank == 0:
            grad = minidl.sparse_coo_tensor(minidl.tensor([rows]), minidl.ones(2, EMB), (ROWS, EMB))
            ps.push("emb", grad)   # (ps.push("emb", values, rows=...) does the same)
        ps.clock()      # BSP: the pushes are applied when every worker has ended the iteration
        applied.append(ps.stats()["pushes"] - before)
    after = ps.pull("emb")
    picked = ps.pull("emb", rows=minidl.tensor([8, 0, 8]))
    ps.shutdown()
    return first.numpy(), after.numpy(), picked.numpy(), applied


print(f"a ({ROWS}, {EMB}) table on 2 servers: server 0 holds rows {bounds(ROWS, 2)[0]}..{bounds(ROWS, 2)[1] - 1}, "
      f"server 1 rows {bounds(ROWS, 2)[1]}..{ROWS - 1}")
first, after, picked, applied = dist.sim.run(3, embedding, 2)[0]
first_on_one = dist.sim.run(2, embedding, 1)[0][0]
whole = minidl.empty(ROWS, EMB).normal_(0.0, 0.5, generator=minidl.Generator().manual_seed(3)).numpy()
assert np.array_equal(first, whole) and np.array_equal(first_on_one, whole)
print("its initial rows equal minidl's N(0, 0.5) draw of the whole table, on 1 server or 2 (a counter-based\n"
      "generator: each server draws its rows without drawing the others')")
changed = sorted(int(r) for r in np.nonzero(np.any(after != first, axis=1))[0])
print(f"sparse COO gradients pushed to rows 1, 3 and then 2, 8: rows changed {changed}")
assert changed == [1, 2, 3, 8]
assert applied == [1, 2]
print(f"the push to rows 1, 3 was applied by {applied[0]} server, the one to rows 2, 8 by {applied[1]}")
# Adagrad's first step on a gradient of ones moves each element by lr * 1 / sqrt(1) = 0.1 (eps aside)
assert np.allclose(after[changed], first[changed] - 0.1, atol=1e-6)
assert np.array_equal(picked, after[[8, 0, 8]])
print("the server-side Adagrad stepped those rows only (its first step: each element by -lr), and a\n"
      "pull by rows returns the same values as a pull of the whole table")

# =============================================================================================
section("5. A whole module: ps.DistributedModel, and the hybrid mode")
# =============================================================================================
USERS5, STEPS5 = 40, 6


def recommender():
    """A user embedding (sparse: a step touches only its batch's rows) and a linear head."""
    rs = np.random.RandomState(7)
    net = minidl.nn.Sequential(minidl.nn.Embedding(USERS5, 4, sparse=True), minidl.nn.Linear(4, 1)).double()
    with minidl.no_grad():
        for p in net.parameters():
            p.copy_(minidl.from_numpy(rs.randn(*p.shape)))
    return net


def batch5(worker, step):
    rs = np.random.RandomState(100 * step + worker)
    return minidl.tensor(rs.randint(0, USERS5, 8)), minidl.from_numpy(rs.randn(8, 1))


def downpour(rank, hybrid):
    if ps.init(num_servers=1, consistency="bsp") == "server":
        return None
    net = recommender()
    model = ps.DistributedModel(net, optimizer=ps.Adam(lr=0.05), hybrid=hybrid,
                                dense_optimizer=lambda params: minidl.optim.Adam(params, lr=0.05))
    for step in range(STEPS5):
        users, target = batch5(rank, step)
        ((model(users) - target) ** 2).mean().backward()
        model.step()                 # push (the gradients averaged over the workers), then ps.clock()
    model.pull_parameters()
    pushes = ps.stats()["pushes"]
    ps.shutdown()
    return [p.detach().numpy() for p in net.parameters()], pushes


alone = recommender()   # one process, each step on both workers' batches together
optimizers = [minidl.optim.SparseAdam([alone[0].weight], lr=0.05), minidl.optim.Adam(alone[1].parameters(), lr=0.05)]
for step in range(STEPS5):
    users, target = (minidl.cat(parts) for parts in zip(batch5(0, step), batch5(1, step)))
    ((alone(users) - target) ** 2).mean().backward()
    for opt in optimizers:
        opt.step()
        opt.zero_grad()
for hybrid in (False, True):
    (params, pushes), _, _ = dist.sim.run(3, downpour, hybrid)
    gap = max(np.abs(a - b.detach().numpy()).max() for a, b in zip(params, alone.parameters()))
    assert gap < 1e-10
    print(f"hybrid={hybrid!s:5}: 2 workers under BSP end {gap:.0e} from one process on their batches together "
          f"(Adam); the server applied {pushes} pushes")
    assert pushes == 2 * STEPS5 * (1 if hybrid else 3)
print("""
ps.DistributedModel registers every parameter by name; before a forward it pulls the dense ones,
and an embedding pulls just the rows its input looks up (a forward pre-hook); step() pushes the
gradients, divided by the number of workers as DDP averages them, then ends the iteration with
ps.clock(). Under BSP the server sums an iteration's pushes and takes one Adam step, so the run is
the one-process run: the union of the workers' batches, the mean gradient. With hybrid=True (Hetu's
hybrid mode) only the embedding goes through the server (one push per worker and step instead of
three); the linear layer stays on the workers, its gradients averaged by all-reduce. That is the
split that pays at scale: a huge table, of which a batch touches a few rows, behind the servers,
and small dense layers kept in sync the data-parallel way. examples/ncf_ps.py and
examples/wide_deep_ps.py train NCF and Wide & Deep so, and benchmarks/wide_deep_ps.py measures
the hybrid mode against all-reduce DDP of a 1M-row model.""")

# =============================================================================================
section("6. Failures: a worker dies, another joins, a frozen one's stale pushes are dropped")
# =============================================================================================
print("""The two roles fail differently. A worker holds nothing that anyone else needs: its copy of the
parameters is a pull away, its gradient is one push among thousands, and its data can be read by
another worker. So a parameter server can lose a worker and go on: the servers drop it from the
clock (SSP no longer waits for it) and training continues on the others. A server holds the only
copy of its shard of the parameters and of the optimizer's state: losing one loses part of the
model, and bringing it back needs checkpoints or replicas (not built yet). Surviving a worker needs
a transport that outlives one: under mpiexec one dead process ends the job (MPI's rule); under the
"gloo" backend and on simulated ranks the parameter server runs over its own TCP links, one per
worker and server, and a link that ends is an event the server acts on.""")

SLOTS, STEPS6, DIES_AT, JOINS_AT, NAP = 5, 24, 8, 14, 0.01


def counted_gradient(v, worker, step):
    """The least-squares gradient in v[:DIM] (scaled by LR), and -1 in v[DIM + worker]: with SGD at
    lr=1 on the server, entry DIM + w counts worker w's applied pushes."""
    x, y = data(worker, step)
    g = np.zeros(DIM + SLOTS)
    g[:DIM] = LR * x.T @ (x @ v[:DIM] - y) / BATCH
    g[DIM + worker] = -1.0
    return minidl.from_numpy(g)


def die():
    """What a worker's process does when it exits without ps.shutdown(): its links to the servers
    close (a SIGKILLed process's links break, which the servers see at once too). A sim rank's links
    close when its function ends; a thread of our own closes them itself."""
    ps._client("die").end.close()


def steps(worker, first, last, nap, times, dies_at=None):
    """Steps ``first`` to ``last`` - 1, each timed: (step, start, pushed, clocked), time.time()."""
    for step in range(first, last):
        start = time.time()
        time.sleep(nap)                        # (the forward and backward of a real model)
        v = ps.pull("w").numpy()
        ps.push("w", counted_gradient(v, worker, step))
        if step == dies_at:                    # pulled, pushed, and gone before its clock (its rank's
            times.append((step, start, time.time(), time.time()))   # function ends: its links close)
            return
        pushed = time.time()
        ps.clock()                             # SSP may wait here for the slowest worker
        times.append((step, start, pushed, time.time()))
    ps.pull("w")                               # (answered in order: every push above was taken)


def newcomer(address, found):
    """A worker started later: ps.join finds the job through its store, takes an id and the clock to
    start at; then it registers the same parameters as the others and trains."""
    try:
        ps.join(address)
        found["id"] = ps.worker_rank()
        found["joined"].set()
        ps.register("w", minidl.zeros(DIM + SLOTS, dtype=minidl.float64), optimizer=ps.SGD(lr=1.0))
        found["times"] = []
        steps(found["id"], ps.stats()["clocks"][found["id"]], STEPS6, NAP, found["times"])
        ps.barrier()
        ps.shutdown()
    except BaseException as e:     # (handed to worker 0, which raises it; our links close so nobody waits)
        found["error"] = e
        found["joined"].set()
        if "id" in found:
            die()


def eventful(rank):
    if ps.init(num_servers=1, consistency="ssp", staleness=2) == "server":
        return None
    ps.register("w", minidl.zeros(DIM + SLOTS, dtype=minidl.float64), optimizer=ps.SGD(lr=1.0))
    times, found = [], {}
    if rank == 2:                              # twice as slow, and it dies at step DIES_AT
        steps(2, 0, STEPS6, 2 * NAP, times, dies_at=DIES_AT)
        return {2: times}                      # (and its thread ends, as its process would)
    if rank == 0:                              # at step JOINS_AT a launcher starts a new worker
        steps(0, 0, JOINS_AT, NAP, times)
        found["joined"] = threading.Event()
        late = threading.Thread(target=newcomer, args=(ps.store_address(), found))
        late.start()
        found["joined"].wait()                 # (so that it joins at clock JOINS_AT or below: a busy
                                               # machine could start its thread after worker 0 went on)
    steps(rank, JOINS_AT if rank == 0 else 0, STEPS6, NAP, times)
    ps.barrier()     # (over the servers: the world's barrier would fail, a rank of the world has gone)
    if rank == 0:
        late.join()
        if "error" in found:
            raise found["error"]
    v, counts = ps.pull("w").numpy(), ps.stats()
    ps.shutdown()
    return {rank: times, **({found["id"]: found["times"]} if "times" in found else {})}, v, counts


results = dist.sim.run(WORKERS + 1, eventful)
timelines = {w: t for r in results[:WORKERS] for w, t in (r if isinstance(r, dict) else r[0]).items()}
_, v, counts = results[0]
lost, joined = counts["lost"], counts["joined"]
applied = {w: int(round(v[DIM + w])) for w in range(SLOTS)}
print(f"\n3 workers and 1 server under SSP(2), {STEPS6} steps; worker 2 (twice as slow) dies in step {DIES_AT}, "
      f"after its push;\na fourth worker is started when worker 0 reaches step {JOINS_AT}.")
print(f"stats()['lost']:   {lost}")
print(f"stats()['joined']: {joined}")
print(f"pushes applied, counted by the parameter itself: {applied}; by the server: "
      f"{dict(sorted(counts['pushes_by'].items()))}")
print(f"steps each worker timed: { {w: len(t) for w, t in sorted(timelines.items())} }; duplicates "
      f"{counts['duplicates']}, staleness {counts['staleness']}")
waits = [[c - p for _, _, p, c in timelines[w] if (c < lost[0]["at"]) == before] for w in (0, 1) for before in (1, 0)]
print(f"workers 0 and 1 waited at ps.clock() {1e3 * np.mean(waits[0] + waits[2]):.1f} ms a step on average while "
      f"worker 2 lived, {1e3 * np.mean(waits[1] + waits[3]):.1f} ms after (measured, not asserted)")
newcomer_id = joined[0]["worker"]
assert [e["worker"] for e in lost] == [2] and lost[0]["clock"] == DIES_AT
assert newcomer_id == WORKERS + 1          # ids go on after the ranks: 0-2 workers, 3 the server
assert JOINS_AT - 2 <= joined[0]["clock"] <= JOINS_AT and timelines[newcomer_id][0][0] == joined[0]["clock"]
# every push applied once: the parameter's count, the server's, and the steps timed agree
for w in range(SLOTS):
    assert applied[w] == counts["pushes_by"].get(w, 0) == len(timelines.get(w, []))
assert applied[2] == lost[0]["pushes"] == DIES_AT + 1      # its last push, sent just before it died, too
assert applied[newcomer_id] == STEPS6 - joined[0]["clock"]
assert counts["pushes"] == sum(applied.values()) and counts["duplicates"] == 0
assert loss(v[:DIM]) < 0.1 * loss(w0)
print(f"""
Worker 2's death is seen at once: its links ended (a killed process's sockets close, and the
server reads that), so the server dropped it from the clock at its clock {lost[0]['clock']}, after
applying its {lost[0]['pushes']} pushes, and SSP stopped waiting for it. (A frozen worker says nothing: the
servers drop it after MINIDL_PS_WORKER_TIMEOUT seconds of silence, and name it in the log after
MINIDL_PS_STALL_LOG.) The newcomer (ps.join(ps.store_address()), in a real job from any process
that knows the address server 0 logs) was given worker id {newcomer_id} and the slowest active
worker's clock, {joined[0]['clock']}, pulled the current parameters and pushed from there, the key ranges of
the servers unchanged.

Exactly once: every request carries a sequence number per server. A worker whose link breaks (a
partition, not a death) connects again and sends every request not yet answered; the server
applies a push it has seen before no second time ("duplicates" in stats). A request travels as one
message, whole or not at all, so no push is ever half-applied. The counters above are the proof:
worker w pushed -1 on entry {DIM}+w, so with SGD at lr=1 that entry counts w's applied pushes, and it
equals both the server's count and the number of steps the worker timed. (Under BSP a lost worker's
pushes of the iteration it did not end are discarded, not applied: an iteration is all of its
pushes or none; on_worker_failure="raise", BSP's default, ends the job instead.)""")

fig = Figure(figsize=(9, 3.2))
ax = fig.add_subplot()
zero = min(t[1] for times in timelines.values() for t in times)
rows = sorted(timelines)
for row, w in enumerate(rows):
    times = timelines[w]
    ax.broken_barh([(s - zero, p - s) for _, s, p, _ in times], (row - 0.35, 0.7), color="tab:blue")
    ax.broken_barh([(p - zero, c - p) for _, _, p, c in times], (row - 0.35, 0.7), color="0.8")
for event, mark, colour in ((lost[0], "X", "tab:red"), (joined[0], "P", "tab:green")):
    row = rows.index(event["worker"])
    ax.plot(event["at"] - zero, row, mark, color=colour, markersize=12)
    died = event is lost[0]
    ax.annotate(f"{'lost' if died else 'joined'} at clock {event['clock']}", (event["at"] - zero, row),
                xytext=(10 if died else -10, 0), textcoords="offset points", ha="left" if died else "right",
                va="center", color=colour)
ax.set_yticks(range(len(rows)), [f"worker {w}" for w in rows])
ax.set_ylim(len(rows) - 0.4, -0.6)
ax.set_xlabel("seconds (blue: a step's work, pull and push; grey: waiting at ps.clock())")
ax.set_title(f"SSP(2): worker 2 dies in step {DIES_AT}, worker {newcomer_id} joins at clock {joined[0]['clock']}")
fig.tight_layout()
path = os.path.join(out_dir, "failures_timeline.png")
fig.savefig(path, dpi=100)
assert os.path.getsize(path) > 0
print(f"\neach worker's steps as they happened, with the death and the join: {path}")

# ---------------------------------------------------------------------------------------------
section("6b. A frozen worker wakes up: its stale pushes are dropped (drop_stale_after)")
FROZEN_STEPS, K = 8, 3
thawed = threading.Event()
fast_done = threading.Barrier(WORKERS - 1, action=thawed.set)   # (sim ranks are threads: they share these)
lockstep = threading.Barrier(WORKERS - 1)   # the fast two clock together: only worker 0 is ever behind


def frozen(rank):
    if ps.init(num_servers=1, consistency="asp", drop_stale_after=K) == "server":
        return None
    ps.register("w", minidl.zeros(DIM + SLOTS, dtype=minidl.float64), optimizer=ps.SGD(lr=1.0))
    for step in range(FROZEN_STEPS):
        v = ps.pull("w").numpy()
        if rank == 0 and step == 0:
            thawed.wait()                      # frozen after its first pull until the others are done
        ps.push("w", counted_gradient(v, rank, step))
        ps.clock()
        if rank != 0:
            lockstep.wait()
    ps.pull("w")                               # (answered in order: every push above was taken)
    if rank != 0:
        fast_done.wait()
    ps.barrier()
    v, counts = ps.pull("w").numpy(), ps.stats()
    ps.shutdown()
    return v, counts


v, counts = dist.sim.run(WORKERS + 1, frozen)[0]
applied = {w: int(round(v[DIM + w])) for w in range(WORKERS)}
print(f"ASP, drop_stale_after={K}: worker 0 froze after its first pull while workers 1 and 2 did all "
      f"{FROZEN_STEPS} steps.")
print(f"applied pushes by worker (the parameter's count): {applied}; dropped_stale {counts['dropped_stale']}; "
      f"age of the pushes in clocks: {counts['age']}")
# worker 0's push at its clock c is FROZEN_STEPS - c clocks behind the newest; those more than K behind are dropped
assert counts["dropped_stale"] == FROZEN_STEPS - K == sum(counts["age"]["dropped"].values())
assert min(counts["age"]["dropped"]) == K + 1
assert applied == {0: K, 1: FROZEN_STEPS, 2: FROZEN_STEPS} == {w: counts["pushes_by"][w] for w in range(WORKERS)}
print(f"""
Woken, worker 0 pushed a gradient computed on the parameters of clock 0 while the others were at
clock {FROZEN_STEPS}: applied, it would step the model along a slope measured {FROZEN_STEPS} clocks ago. With
drop_stale_after={K} the server drops (counts, does not apply) every push made more than {K} clocks
behind the newest worker: worker 0's first {FROZEN_STEPS - K}, until it had caught up to within {K} clocks.
The rule looks at clocks, not at which values a push was computed on, so a worker that is always
slower has its pushes dropped for good: a straggler's gradients are thrown away rather than let
them steer (a relative of synchronous SGD's backup workers, where each step's slowest gradients are
neither waited for nor used). Under SSP(s) the clock keeps pushes within
about s clocks already; drop_stale_after matters under ASP, where nothing else does.""")

# =============================================================================================
section("7. A server dies: checkpoints, a write-ahead log, and a restart")
# =============================================================================================
print("""A server holds the only copy of its shard and of its optimizer's state, so a server's death
needs what databases do: checkpoints of the state now and then, and a write-ahead log of every
change since, made durable (fdatasync) before the change is acknowledged. ps.init(checkpoint_dir=...,
durable=True) does both; `python -m minidl.dist.ps --resume DIR --server K` restarts a dead server
from them while its workers wait, and they send again every request it has not answered. Threads
cannot be SIGKILLed, so this section runs a real job: 3 processes under the "gloo" backend.""")

JOB = f'''
import json, sys, time
import numpy as np
import minidl, minidl.dist as dist
from minidl.dist import ps
DIM, BATCH, LR, STEPS = {DIM}, {BATCH}, {LR}, 16
W_TRUE = np.random.RandomState(0).randn(DIM)   # (the batches of data() in the tutorial)
dist.init_process_group("gloo")
if ps.init(1, "bsp", checkpoint_dir=sys.argv[1], checkpoint_every=4, durable=True) == "server":
    sys.exit()
me = ps.worker_rank()
ps.register("w", minidl.zeros(DIM, dtype=minidl.float64), optimizer=ps.SGD(lr=LR))
for step in range(STEPS):
    w = ps.pull("w").numpy()
    rs = np.random.RandomState([me, step])
    x = rs.randn(BATCH, DIM)
    y = x @ W_TRUE + 0.1 * rs.randn(BATCH)
    print("STEP", step, time.time(), flush=True)
    ps.push("w", minidl.from_numpy(x.T @ (x @ w - y) / BATCH))
    ps.clock()
ps.barrier()
if me == 0:
    print("RESULT", json.dumps(ps.pull("w").tolist()), flush=True)
ps.shutdown()
'''
job_dir = tempfile.mkdtemp(prefix="minidl-tutorial-08-job-")
with open(os.path.join(job_dir, "job.py"), "w") as f:
    f.write(JOB)
checkpoints = os.path.join(job_dir, "checkpoints")
with socket.socket() as probe:   # (a free port for the world's store)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
env = dict(os.environ, WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
           PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(minidl.__file__)),
                                                    os.environ.get("PYTHONPATH")])),
           MINIDL_FAULT="rank=2 at=ps_apply:10 do=kill")   # (the server: SIGKILL after its 10th step)
logs = [open(os.path.join(job_dir, f"rank{r}.out"), "w+") for r in range(3)]
procs = [subprocess.Popen([sys.executable, os.path.join(job_dir, "job.py"), checkpoints], env=dict(env, RANK=str(r)),
                          stdout=logs[r], stderr=subprocess.STDOUT) for r in range(3)]
try:
    while procs[2].poll() is None:
        time.sleep(0.01)
    died = time.time()
    time.sleep(1.0)                            # (the workers wait: a person or a supervisor restarts it)
    restarted = time.time()
    restart = subprocess.run([sys.executable, "-m", "minidl.dist.ps", "--resume", checkpoints, "--server", "0"],
                             env=env, capture_output=True, text=True, timeout=120)
    codes = [p.wait(timeout=120) for p in procs]
finally:
    for p in procs:
        p.kill()
outputs = []
for f in logs:
    f.seek(0)
    outputs.append(f.read())
    f.close()
said = restart.stdout + restart.stderr
assert codes == [0, 0, -9] and restart.returncode == 0, (codes, outputs, said)
print(f"the server killed itself (SIGKILL) after its 10th optimizer step; restarted 1 s later:\n  {said.strip()}")
for line in outputs[0].splitlines():
    if "parameter server 0" in line:
        print(f"  worker 0: {line}")

w_bsp = np.zeros(DIM)   # BSP: each step one SGD step on the sum of both workers' gradients
for step in range(16):
    w_bsp = w_bsp - LR * sum(numpy_gradient(w_bsp, r, step) for r in range(2))
final = np.array(json.loads(outputs[0].split("RESULT ")[1]))
np.testing.assert_allclose(final, w_bsp, rtol=1e-12, atol=1e-14)
print(f"""
Final w equals BSP's recursion in numpy to 1e-12: no acknowledged push was lost, none applied
twice. The restart loaded the newest checkpoint (written every 4 clocks), replayed the log after it
(the pushes and clocks acknowledged since), and took the server's old port; the workers had seen
their links end at once, waited, connected again and sent the requests still unanswered; those the
log had taken were answered without being applied again (their sequence numbers). Without
durable=True the log is not kept and a restart goes back to the checkpoint: cheaper pushes, lost
updates. A whole job started again (minidl.dist.run --max-restarts) resumes with
ps.init(..., resume=True): every worker starts at ps.current_clock().""")

starts = {r: [(int(step), float(t)) for _, step, t in (line.split() for line in outputs[r].splitlines()
                                                     if line.startswith("STEP "))] for r in range(2)}
fig = Figure(figsize=(9, 2.6))
ax = fig.add_subplot()
zero = min(t for r in starts for _, t in starts[r])
for r in range(2):
    ax.plot([t - zero for _, t in starts[r]], [r] * len(starts[r]), "o", color="tab:blue", markersize=4)
back = min(t for r in starts for _, t in starts[r] if t > restarted)
ax.axvspan(died - zero, restarted - zero, color="tab:red", alpha=0.2, label="server dead")
ax.axvspan(restarted - zero, back - zero, color="tab:orange", alpha=0.2,
           label="restarting: python starts, loads, replays; workers reconnect")
ax.set_yticks([0, 1], ["worker 0", "worker 1"])
ax.set_ylim(1.6, -0.6)
ax.set_xlabel("seconds (a dot: a step begins)")
ax.set_title("BSP, durable: the server SIGKILLed after step 10, restarted 1 s later")
ax.legend(loc="center right", fontsize=8)
fig.tight_layout()
path = os.path.join(out_dir, "server_restart_timeline.png")
fig.savefig(path, dpi=100)
assert os.path.getsize(path) > 0
print(f"\nthe workers' steps around the server's death: {path} (from the restart command to the next step: "
      f"{back - restarted:.2f} s, measured)")

print(f"\nAll claims checked ({time.perf_counter() - began:.1f} s).")
