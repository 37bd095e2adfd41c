"""One rank of a parameter-server job that tests/test_ps_faults.py breaks on purpose (MINIDL_FAULT), run
as one process per rank of the "gloo" backend (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

Options, as name=value arguments: consistency (asp), staleness (0), servers (1), steps (12),
on_worker_failure, drop_stale_after, cols (8192), checkpoint_dir, checkpoint_every, durable (0/1),
model (ledger), replicate (0/1), resume (``auto``: resume when minidl.dist.run restarted the job). Each worker's
steps go on from ``ps.current_clock()`` (0, or where a resumed job starts). ``send_fault_at=K``: MINIDL_SEND_FAULT becomes
MINIDL_FAULT just before this rank's K-th push, so that ``at=send`` cuts that push and not the
registration (the first large message otherwise).

Every worker w registers ``w`` = zeros(workers + 1, cols) float64 with ps.SGD(lr=1.0) and each step
pulls it, pushes a gradient that is -1 on row w only (so row w counts w's applied pushes; the last
row, pushed by nobody, stays 0), waits for the push, and clocks. Workers print "STEP <k> <time>"
before each push and "STEPS DONE <time>" after the last clock. Survivors then meet at ps.barrier();
worker 0 pulls ``w`` and prints one line "RESULT <json>": per row and server shard the [min, max] of
its values, and ps.stats(). A worker whose clock raises lets the error end it (exit code 1).

``model=lsq``: instead, a least-squares fit of ``v`` (float64, DIM values, server-side Adam) where worker
w's gradient at step t is that of its own batch (``lsq_batch(w, t)``, seeded), so that under BSP the
final ``v`` follows a closed recursion the test computes with numpy; RESULT holds ``v`` too.
"""
import json
import os
import sys
import time

import numpy as np

import minidl
import minidl.dist as dist
from minidl.dist import ps
from minidl.dist.ps.sharding import bounds

opts = dict(arg.split("=", 1) for arg in sys.argv[1:])
consistency = opts.get("consistency", "asp")
staleness, servers = int(opts.get("staleness", 0)), int(opts.get("servers", 1))
steps, cols = int(opts.get("steps", 12)), int(opts.get("cols", 8192))
drop = int(opts["drop_stale_after"]) if "drop_stale_after" in opts else None
send_fault_at = int(opts.get("send_fault_at", 0))
every = int(opts["checkpoint_every"]) if "checkpoint_every" in opts else None
DIM, BATCH, LR = 6, 16, 0.05


def lsq_batch(worker, step):
    rng = np.random.default_rng([worker, step])
    x = rng.normal(size=(BATCH, DIM))
    return x, x @ np.arange(1.0, DIM + 1) + 0.1 * rng.normal(size=BATCH)


dist.init_process_group("gloo")
role = ps.init(servers, consistency, staleness, on_worker_failure=opts.get("on_worker_failure"),
               drop_stale_after=drop, checkpoint_dir=opts.get("checkpoint_dir"), checkpoint_every=every,
               durable=opts.get("durable") == "1", replicate=opts.get("replicate") == "1",
               resume=opts.get("resume") == "auto" and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0)
if role == "server":
    print("SERVER DONE", flush=True)
    sys.exit(0)

me, workers = ps.worker_rank(), ps.num_workers()
if opts.get("model") == "lsq":
    ps.register("v", minidl.zeros(DIM, dtype=minidl.float64), optimizer=ps.Adam(lr=LR))
    for step in range(ps.current_clock() + 1, steps + 1):
        v = ps.pull("v").numpy()
        x, y = lsq_batch(me, step)
        print(f"STEP {step} {time.time():.6f}", flush=True)
        ps.push("v", minidl.from_numpy(x.T @ (x @ v - y) / BATCH)).wait()
        ps.clock()
    print(f"STEPS DONE {time.time():.6f}", flush=True)
    ps.barrier()
    if me == 0:
        print("RESULT " + json.dumps({"v": ps.pull("v").tolist(), "stats": ps.stats()}), flush=True)
    ps.shutdown()
    sys.exit(0)
rows = workers + 1
ps.register("w", minidl.zeros(rows, cols, dtype=minidl.float64), optimizer=ps.SGD(lr=1.0))
grad = minidl.zeros(rows, cols, dtype=minidl.float64)
grad[me] = -1.0
for step in range(ps.current_clock() + 1, steps + 1):
    ps.pull("w")
    if step == send_fault_at:
        os.environ["MINIDL_FAULT"] = os.environ["MINIDL_SEND_FAULT"]
    print(f"STEP {step} {time.time():.6f}", flush=True)
    ps.push("w", grad).wait()
    ps.clock()
print(f"STEPS DONE {time.time():.6f}", flush=True)

ps.barrier()
if me == 0:
    flat = ps.pull("w").reshape(-1)
    edges = bounds(rows * cols, servers)
    shards = []
    for r in range(rows):
        row = []
        for k in range(servers):
            lo, hi = max(edges[k], r * cols), min(edges[k + 1], (r + 1) * cols)
            if lo < hi:
                part = flat[lo:hi]
                row.append([float(part.min()), float(part.max())])
        shards.append(row)
    print("RESULT " + json.dumps({"shards": shards, "stats": ps.stats()}), flush=True)
ps.shutdown()
