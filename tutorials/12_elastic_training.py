"""Tutorial 12: elastic training, all-reduce data parallelism that survives a dead worker and takes a new one.

Run it:  python tutorials/12_elastic_training.py

At scale a machine dies every few hours. Data parallelism with all-reduce (tutorials 5 and 6) keeps
every rank in lock-step, so one dead rank stops all of them; a parameter server (tutorial 8) shrugs a
worker off, but all-reduce training cannot. ``minidl.dist.elastic`` (Horovod's elastic model, on
minidl's pieces) lets the survivors go on in the same job, and lets a worker started later join.

1. **Why a dead rank breaks a ring**, followed in a few lines of Python: every collective needs
   every rank, so the survivors cannot finish it; they can only fail, and must fail rather than
   hang. The elastic answer: commit the state in memory, roll back to the commit, rebuild the group
   among the survivors, re-split the data.
2. **A real job** under ``python -m minidl.dist.run``: 3 worker processes train a small float64
   model; one is SIGKILLed in the middle of an all-reduce (``MINIDL_FAULT``); later a fourth process
   joins at a commit. Every worker writes a time stamp for each step, commit, failure, rollback,
   rebuild and sync; we draw them as a measured timeline.
3. **What is kept.** No committed step is lost or taken twice (the step log that rolls back with
   the model); the final weights equal a failure-free run's, computed in numpy, to 1e-13 — because
   the global batch of each step does not depend on the world size; and the world sizes seen.
   The time to detect and to recover is printed (measured, not asserted).
4. **What it costs**: the commit's copy of the state, measured against a training step, and the
   other way to survive a failure, restarting the whole job from a distributed checkpoint.

The picture is written to ``$MINIDL_TUTORIAL_OUT`` if set, else to a fresh temporary directory;
the job's files go to a temporary directory removed at the end. Every claim is checked with ``assert``.
"""
import argparse
import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()

import matplotlib  # noqa: E402

matplotlib.use("Agg")   # (draw to a file; no display needed)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

import minidl  # noqa: E402

began = time.perf_counter()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(minidl.__file__)))
out_dir = os.environ.get("MINIDL_TUTORIAL_OUT") or tempfile.mkdtemp(prefix="minidl-tutorial-12-")
os.makedirs(out_dir, exist_ok=True)
work = tempfile.mkdtemp(prefix="minidl-tutorial-12-job-")
atexit.register(shutil.rmtree, work, True)


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


# =============================================================================================
section("1. Why a dead rank breaks a ring, and the elastic answer")
# =============================================================================================


def ring_reduce_scatter(n, dead=None):
    """A ring reduce-scatter of n chunks on n ranks, followed in sets: ``have[r][c]`` is the ranks whose
    chunk c is summed into rank r's copy. At step s every rank r sends its chunk (r - s) % n to rank r + 1,
    then waits for rank r - 1's and adds it to its own. A dead rank sends nothing, and a rank left waiting
    never goes on (without a timeout: for ever). Returns (have, the step at which each rank waits for ever)."""
    have = [[{r} for _ in range(n)] for r in range(n)]
    stuck = {} if dead is None else {dead: -1}
    for s in range(n - 1):
        sent = [r not in stuck for r in range(n)]   # (whoever still goes on sends first)
        for r in range(n):
            receiver = (r + 1) % n
            if receiver in stuck:
                continue
            if not sent[r]:
                stuck[receiver] = s                 # nothing comes from r: its successor waits for ever
                continue
            c = (r - s) % n
            have[receiver][c] = have[receiver][c] | have[r][c]
    return have, stuck


N = 4
have, stuck = ring_reduce_scatter(N)
done = [(r, c) for r in range(N) for c in range(N) if have[r][c] == set(range(N))]
assert sorted(done) == [(r, (r + 1) % N) for r in range(N)] and not stuck   # each rank: one whole chunk
for c in range(N):   # the sum of chunk c went round the whole ring: it holds every rank's part
    assert have[(c - 1) % N][c] == set(range(N))
have, stuck = ring_reduce_scatter(N, dead=2)
done_dead = [(r, c) for r in range(N) for c in range(N) if have[r][c] == set(range(N))]
assert done_dead == [] and all(stuck[(2 + k) % N] == k - 1 for k in range(N))   # one hop a step
print(f"A ring reduce-scatter on {N} ranks: after {N - 1} steps rank r holds the full sum of chunk r + 1, "
      f"each\nsum having gone round the whole ring: {len(done)} chunks complete. With rank 2 dead:")
for r in range(N):
    print(f"  rank {r}: {'dead' if r == 2 else f'waits for rank {(r - 1) % N} from step {stuck[r]} on'}")
print(f"""  chunks complete: {len(done_dead)}.

It is not the ring's fault. Any all-reduce computes a sum over every rank's input, by whatever route
(ring, tree, halving-doubling): a rank that never sends leaves every survivor waiting for a message
that will not come, one hop after another, as above. The survivors cannot finish the collective;
what they can do is fail instead of hanging. minidl's socket transport raises DistError at once when a
peer's connection closes (a killed process's sockets close), and declares a silent peer frozen after
MINIDL_DIST_HEARTBEAT seconds (a SIGSTOPped one). Then the step is broken in a worse way than a
hang: some ranks may have finished the all-reduce and taken the optimizer step, others not, so the
replicas are no longer the same. minidl.dist.elastic's answer, Horovod's:

  - commit: every few steps (here every step) each rank copies its state in memory: the model, the
    optimizer, the sampler's place in the epoch and any values (state.commit(): no disk, no network);
  - roll back: when a collective raises, every survivor puts its last commit back, so the steps after
    it, taken by some ranks and not by others, are redone by all alike;
  - rebuild: the survivors meet in a new round on the job's store (it lives in the launcher, which
    outlives any worker), closed once every member of the last round has joined or stopped beating;
    they start a new process group at the smaller size; rank 0's commit is broadcast;
  - re-split: the sampler splits what is left of the epoch among the new ranks.
A worker started later waits on the store; at a commit the others stop and rebuild with it.""")

# =============================================================================================
section("2. A real job: a worker SIGKILLed mid-all-reduce, another joining later")
# =============================================================================================
JOB = r'''
"""One worker of tutorial 12's elastic job: a small MLP in float64 by DDP under minidl.dist.elastic, a commit
after every step, each step's global batch the next GLOBAL samples of the epoch whatever the world size. It
writes a time stamp per event to OUT/events-<pid>.jsonl as it goes (a killed worker keeps what it wrote),
and its rank, committed step log and weights to OUT/done-<pid>.json at the end."""
import time
STARTED = time.time()   # (before the imports: start-up is what a restarted job pays again)
import json
import os

import numpy as np

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist import elastic
from minidl.nn.parallel import DistributedDataParallel

OUT, SLEEP = os.environ["OUT"], float(os.environ["SLEEP"])
STEPS = int(os.environ["STEPS"])   # at least; and on until the newcomer is in (the tutorial must see it join)
GLOBAL, FULL = 24, 3   # samples per step over all ranks (divisible by every world size); the job's size
events = open(os.path.join(OUT, f"events-{os.getpid()}.jsonl"), "a", buffering=1)


def mark(what, **info):
    """One event, written at once (line-buffered: a SIGKILL loses nothing written before it)."""
    events.write(json.dumps({"what": what, "t": time.time(), **info}) + "\n")


mark("started", t=STARTED)
rs = np.random.RandomState(0)
X, Y = rs.randn(96, 4), rs.randn(96, 1)
model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1)).double()
with minidl.no_grad():
    for p in model.parameters():
        p.copy_(minidl.from_numpy(rs.uniform(-0.5, 0.5, tuple(p.shape))))
optimizer = minidl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


class TimedState(elastic.State):
    def restore(self):
        """A roll back (after a failure) or a sync's restore, timed."""
        began = time.time()
        super().restore()
        mark("restore", began=began, step=self.step)


state = TimedState(model, optimizer, sampler=elastic.ElasticSampler(list(range(96)), shuffle=False), step=0, log=[])
# After a rebuild: the hook where the learning rate or the per-rank batch would follow the new world size.
# Here the global batch stays GLOBAL, split into GLOBAL // world per rank (below), so the lr stays too.
state.register_reset_callbacks([lambda: mark("rebuilt", world=dist.get_world_size(), rank=dist.get_rank())])


@elastic.run
def train(state):
    world, rank = dist.get_world_size(), dist.get_rank()
    mark("synced", world=world, rank=rank, step=state.step)
    ddp = DistributedDataParallel(state.model)
    per_rank = GLOBAL // world
    while state.step < STEPS or world < FULL:
        mine = list(state.sampler)               # this rank's share of what is left of the epoch
        for start in range(0, len(mine) - per_rank + 1, per_rank):
            step = state.step
            mark("begin", step=step, world=world)
            try:
                idx = mine[start:start + per_rank]
                optimizer.zero_grad()
                loss = ((ddp(minidl.from_numpy(X[idx])) - minidl.from_numpy(Y[idx])) ** 2).mean()
                loss.backward()                   # DDP's all-reduce of the gradients
                optimizer.step()
                mark("end", step=step)
                state.sampler.record_batch(per_rank)
                state.log = state.log + [[step, world]]
                state.step += 1
                began = time.time()
                state.commit()
                mark("commit", began=began, step=step)
            except dist.DistError as e:
                mark("failure", step=step, error=str(e)[:200])
                raise                             # (elastic.run rolls back, rebuilds and calls train again)
            except elastic.MembershipChanged:
                mark("commit", began=began, step=step)
                mark("newcomer", step=step)
                raise
            time.sleep(SLEEP)                     # (a bigger model's compute: a few steps a second)
            if state.step >= STEPS and world == FULL:
                break
        else:
            state.sampler.set_epoch(state.sampler.epoch + 1)


if os.environ.get("MINIDL_ELASTIC_JOIN") == "1":   # a newcomer: ready; the tutorial says when to ask to join
    mark("ready")
    while not os.path.exists(os.path.join(OUT, "go")):
        time.sleep(0.01)
    mark("announce")
train(state)
with open(os.path.join(OUT, f"done-{os.getpid()}.json"), "w") as f:
    json.dump({"rank": dist.get_rank(), "log": state.log,
               "weights": [p.detach().numpy().ravel().tolist() for p in model.parameters()]}, f)
'''
STEPS, KILL_STEP, GO_STEP, SLEEP = 30, 5, 10, 0.1
job = os.path.join(work, "worker.py")
with open(job, "w") as f:
    f.write(JOB)
events_dir = os.path.join(work, "events")
os.makedirs(events_dir)
with socket.socket() as probe:   # (a free port for the launcher's store)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
           OUT=events_dir, STEPS=str(STEPS), SLEEP=str(SLEEP))
said = {name: open(os.path.join(work, f"{name}.out"), "w+") for name in ("launcher", "newcomer")}
launched = time.time()
launcher = subprocess.Popen([sys.executable, "-m", "minidl.dist.run", "--rdzv-backend", "static", "--master-port",
                             str(port), "--rdzv-id", "tutorial-12", "--nproc-per-node", "3", job],
                            env=dict(env, MINIDL_FAULT=f"rank=2 at=all_reduce:{KILL_STEP + 1} do=kill"),
                            stdout=said["launcher"], stderr=subprocess.STDOUT)
# The newcomer: the same script, started by hand with the launcher's address and MINIDL_ELASTIC_JOIN=1 (as
# a scheduler would start a replacement). It starts up now, alongside the job, and asks to join when told.
joiner = subprocess.Popen([sys.executable, job], env=dict(env, MINIDL_ELASTIC_JOIN="1", MASTER_ADDR="127.0.0.1",
                                                          MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True",
                                                          TORCHELASTIC_RUN_ID="tutorial-12",
                                                          TORCHELASTIC_RESTART_COUNT="0", MINIDL_RUN_ATTEMPT="0"),
                          stdout=said["newcomer"], stderr=subprocess.STDOUT)


def read_events():
    """pid -> the events its worker wrote so far (the last line may be half written: skipped)."""
    found = {}
    for name in os.listdir(events_dir):
        if name.startswith("events-"):
            with open(os.path.join(events_dir, name)) as f:
                found[int(name[7:-6])] = [json.loads(line) for line in f.read().split("\n")[:-1]]
    return found


def output():
    """What the launcher and the newcomer said (for an assert's message)."""
    for f in said.values():
        f.seek(0)
    return "".join(f"--- {name} ---\n{f.read()[-4000:]}\n" for name, f in said.items())


try:
    # told once a survivor has begun step GO_STEP at size 2: after the failure's round, a few steps later
    deadline = time.monotonic() + 120
    while not any(e["what"] == "begin" and e["world"] == 2 and e["step"] >= GO_STEP
                  for es in read_events().values() for e in es):
        assert launcher.poll() is None and joiner.poll() is None and time.monotonic() < deadline, output()
        time.sleep(0.02)
    open(os.path.join(events_dir, "go"), "w").close()
    codes = launcher.wait(timeout=120), joiner.wait(timeout=120)
finally:
    for proc in (launcher, joiner):   # (only if something went wrong: the launcher stops its workers on SIGTERM)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
assert codes == (0, 0), output()
for f in said.values():
    f.close()
events = read_events()
finished = {}
for name in os.listdir(events_dir):
    if name.startswith("done-"):
        with open(os.path.join(events_dir, name)) as f:
            finished[int(name[5:-5])] = json.load(f)
killed = [pid for pid in events if pid not in finished]
newcomer = joiner.pid
survivors = sorted((pid for pid in finished if pid != newcomer), key=lambda pid: finished[pid]["rank"])
assert len(killed) == 1 and len(survivors) == 2 and newcomer in finished
killed = killed[0]
print(f"3 workers under python -m minidl.dist.run, MINIDL_FAULT='rank=2 at=all_reduce:{KILL_STEP + 1} do=kill': "
      f"rank 2 kills itself\n(SIGKILL) at the start of its all-reduce of step {KILL_STEP}; a fourth process is "
      f"started with MINIDL_ELASTIC_JOIN=1\nand let ask to join once the survivors have begun step {GO_STEP}. "
      f"The launcher and the newcomer both exited 0.")
for pid in survivors + [killed, newcomer]:
    what = [e["what"] for e in events[pid]]
    print(f"  pid {pid}: {what.count('end')} steps, {what.count('commit')} commits, "
          f"{what.count('failure')} failure(s), {what.count('rebuilt')} rebuild(s)"
          + (f", rank {finished[pid]['rank']} at the end" if pid in finished else ", killed"))

# =============================================================================================
section("3. No committed step lost; the failure-free weights; the world sizes seen")
# =============================================================================================
logs = {pid: finished[pid]["log"] for pid in finished}
log = logs[survivors[0]]
assert all(other == log for other in logs.values())          # the log is state: synced to the newcomer too
total = len(log)
assert [s for s, _ in log] == list(range(total))               # every step once: none lost, none taken twice
sizes = [w for _, w in log]
shrunk = sizes.count(2)
regrown = total - KILL_STEP - shrunk
assert sizes == [3] * KILL_STEP + [2] * shrunk + [3] * regrown
assert shrunk >= GO_STEP - KILL_STEP + 1 and total == max(STEPS, KILL_STEP + shrunk)   # joined after the go
assert all(any(e["what"] == "rebuilt" and e["world"] == 3 for e in events[pid]) for pid in survivors)
committed_by_killed = [e["step"] for e in events[killed] if e["what"] == "commit"]
assert committed_by_killed == list(range(KILL_STEP)) and events[killed][-1]["what"] == "begin"
assert events[killed][-1]["step"] == KILL_STEP
failures = {pid: [e for e in events[pid] if e["what"] == "failure"] for pid in survivors}
for pid in survivors:   # the first failure: in step KILL_STEP, at once followed by the roll back to its start
    failure = failures[pid][0]
    after = events[pid][events[pid].index(failure) + 1]
    assert failure["step"] == KILL_STEP and after["what"] == "restore" and after["step"] == KILL_STEP
print(f"""The committed step log (state.log, [step, world size], rolled back with the model) is the same on
the 3 workers that finished, the newcomer included (it got it in the sync):
  steps 0..{total - 1}, each once; world sizes: {KILL_STEP} steps at 3, {shrunk} at 2, then {regrown} at 3.
The killed worker had committed steps {committed_by_killed} and began step {KILL_STEP}. The survivors'
all-reduce of step {KILL_STEP} raised DistError:
  "{failures[survivors[0]][0]['error'][:90]}..."
so each restored its commit of step {KILL_STEP - 1} (state.step back to {KILL_STEP}), and they redid step {KILL_STEP}
at size 2.""")

# The failure-free run, in numpy: the same MLP, SGD with momentum, each step on the next 24 samples.
rs = np.random.RandomState(0)
X, Y = rs.randn(96, 4), rs.randn(96, 1)
W1, B1, W2, B2 = (rs.uniform(-0.5, 0.5, shape) for shape in ((16, 4), (16,), (1, 16), (1,)))
params, velocity = [W1, B1, W2, B2], None
for step in range(total):
    rows = slice(24 * (step % 4), 24 * (step % 4) + 24)       # 96 samples: 4 steps an epoch, in order
    x, y = X[rows], Y[rows]
    h = np.tanh(x @ W1.T + B1)
    d_out = 2 * (h @ W2.T + B2 - y) / len(x)                   # d mean((out - y)^2) / d out
    d_h = (d_out @ W2) * (1 - h ** 2)
    grads = [d_h.T @ x, d_h.sum(0), d_out.T @ h, d_out.sum(0)]
    velocity = grads if velocity is None else [0.9 * v + g for v, g in zip(velocity, grads)]
    for p, v in zip(params, velocity):
        p -= 0.1 * v                                           # (in place: W1, B1, W2, B2 are updated)
gaps = []
for pid in finished:
    for got, want in zip(finished[pid]["weights"], params):
        np.testing.assert_allclose(np.array(got).reshape(want.shape), want, rtol=0, atol=1e-13)
        gaps.append(np.abs(np.array(got).reshape(want.shape) - want).max())
print(f"""
Final weights of all 3 finished workers = the failure-free run in numpy, to {max(gaps):.1e} (float64; the
assert: 1e-13). Why a run whose world changed twice can equal one that never failed: each step's
GLOBAL batch is the next 24 samples of the epoch whatever the world size. The ElasticSampler splits
what is left of the epoch among the ranks of the moment, and each rank takes 24 // world of its share
(8 on 3 ranks, 12 on 2); DDP averages the ranks' mean gradients, which is the mean over the 24. So
every step is the same SGD step; only the order of the sum differs (3 means of 8, or 2 of 12), hence
rounding, not equality. Had each rank kept 8 samples a step, the survivors' steps would have been of
16 samples: another run, comparable only to a failure-free run that shrinks at the same step. That
is the documented hook's choice (state.register_reset_callbacks): after a rebuild, keep the global
batch and re-split it (as here: the learning rate stays), or keep the per-rank batch and scale the
learning rate with the world size (the linear scaling rule).""")

# -- the measured times: detect, roll back, rebuild, sync, and the join -----------------------
def first(pid, what, after=0.0):
    """Worker pid's first event ``what`` at or after time ``after``."""
    return next(e for e in events[pid] if e["what"] == what and e["t"] >= after)


last_begin = events[killed][-1]["t"]                    # the killed worker began step KILL_STEP here
start_up = {pid: first(pid, "synced")["t"] - first(pid, "started")["t"] for pid in survivors}
print("\nMeasured on this machine (not asserted):")
for pid in survivors:
    fail = first(pid, "failure")
    back = first(pid, "restore", fail["t"])
    rebuilt, synced = first(pid, "rebuilt", fail["t"]), first(pid, "synced", fail["t"])
    redone = first(pid, "commit", synced["t"])
    print(f"  rank {finished[pid]['rank']}: started up in {start_up[pid]:.2f} s (Python, imports, the group); "
          f"its all-reduce raised {1e3 * (fail['t'] - last_begin):.0f} ms\n    after the killed worker began "
          f"step {KILL_STEP}; roll back {1e3 * (back['t'] - back['began']):.2f} ms; the group of 2 rebuilt "
          f"{1e3 * (rebuilt['t'] - back['t']):.0f} ms later;\n    synced in {1e3 * (synced['t'] - rebuilt['t']):.0f} "
          f"ms; step {KILL_STEP} redone and committed {1e3 * (redone['t'] - fail['t']):.0f} ms after the failure")
announced = first(newcomer, "announce")
saw, stopped = min(((pid, e) for pid in survivors for e in events[pid] if e["what"] == "newcomer"),
                   key=lambda found: found[1]["t"])   # (one survivor at least saw the newcomer at a commit)
paused = first(saw, "synced", stopped["t"])["t"] - stopped["t"]
joined = first(newcomer, "synced")["t"] - announced["t"]
print(f"  the newcomer: ready {first(newcomer, 'ready')['t'] - first(newcomer, 'started')['t']:.2f} s after it "
      f"started; asked to join and was training {1e3 * joined:.0f} ms later,\n    at the commit of step "
      f"{stopped['step']}, where the others paused {1e3 * paused:.0f} ms for the round and the sync")
print(f"""
The failure is seen at once: a SIGKILLed process's sockets close, and the survivors' all-reduce
reads that (a frozen peer would take MINIDL_DIST_HEARTBEAT seconds, default 10). The new group waits
for the round to close: every member of the last round has joined it or is known dead. The launcher
saw the process end and marked it dead on the store at its next poll (--monitor-interval, 0.1 s);
else its beats would have had to stop for MINIDL_ELASTIC_DEAD_SECONDS (by default as long as the
heartbeat). The roll back is a copy in memory. A newcomer costs the others a round and a sync, no
more; its own start-up is its own. The members stop for it together: the first to see it waiting, at
a commit, fixes the next commit as the one all stop at (there is an all-reduce between two commits,
so none can be two commits ahead). (So that the join is seen on any machine, however slow, the
workers of this job go on beyond {STEPS} steps until the newcomer is in; here {regrown} steps at 3 followed it.)""")

# -- the timeline ------------------------------------------------------------------------------
rows = survivors + [killed, newcomer]
names = [f"rank {finished[pid]['rank']}" for pid in survivors] + ["rank 2\n(killed)", "newcomer\n(then rank 2)"]
zero = launched
COLOUR = {3: "tab:blue", 2: "tab:orange"}
SHADE = {"start-up": ("0.6", 0.5), "waiting": ("khaki", 0.6), "failure": ("tab:red", 0.3), "join": ("tab:green", 0.5)}


def span(ax, row, t0, t1, kind):
    colour, alpha = SHADE[kind]
    ax.broken_barh([(t0 - zero, t1 - t0)], (row - 0.3, 0.6), color=colour, alpha=alpha, linewidth=0)


def draw(ax, lo, hi, detail):
    """Each worker's row between lo and hi seconds: steps (a tick each, or bars if ``detail``), start-up,
    the failure, roll back, rebuild and sync, the join."""
    for row, pid in enumerate(rows):
        es = events[pid]
        span(ax, row, es[0]["t"], first(pid, "ready" if pid == newcomer else "synced")["t"], "start-up")
        begun = None
        for e in es:
            t = e["t"] - zero
            if e["what"] == "begin":
                begun = e
            elif e["what"] == "end" and detail:
                ax.broken_barh([(begun["t"] - zero, e["t"] - begun["t"])], (row - 0.3, 0.6),
                               color=COLOUR[begun["world"]])
            elif e["what"] == "end":
                ax.plot(begun["t"] - zero, row, "|", color=COLOUR[begun["world"]], markersize=14, markeredgewidth=1.5)
            elif e["what"] == "commit" and detail:
                ax.broken_barh([(e["began"] - zero, e["t"] - e["began"])], (row - 0.3, 0.6), color="k")
            elif e["what"] == "failure":           # the step it broke, then roll back, rebuild, sync
                ax.broken_barh([(begun["t"] - zero, e["t"] - begun["t"])], (row - 0.3, 0.6),
                               color=COLOUR[begun["world"]], alpha=0.35)
                ax.plot(t, row, "X", color="tab:red", markersize=10)
                span(ax, row, e["t"], first(pid, "synced", e["t"])["t"], "failure")
                if detail:
                    back = first(pid, "restore", e["t"])
                    ax.annotate(f"roll back to the\ncommit of step {back['step'] - 1}", (back["t"] - zero, row),
                                xytext=(3, -19), textcoords="offset points", fontsize=7, color="tab:red")
            elif e["what"] in ("newcomer", "announce"):
                span(ax, row, e["t"], first(pid, "synced", e["t"])["t"], "join")
            elif e["what"] == "ready":
                span(ax, row, e["t"], first(pid, "announce")["t"], "waiting")
        if pid == killed:
            ax.broken_barh([(begun["t"] - zero, 0.003)], (row - 0.3, 0.6), color=COLOUR[begun["world"]], alpha=0.35)
            ax.plot(begun["t"] - zero, row, "X", color="k", markersize=10)
            ax.annotate(f"SIGKILL in step {begun['step']}'s all-reduce", (begun["t"] - zero, row), xytext=(8, 0),
                        textcoords="offset points", va="center", fontsize=8)
    ax.set_xlim(lo, hi)
    ax.set_yticks(range(len(rows)), names, fontsize=8)
    ax.set_ylim(len(rows) - 0.4, -0.6)


fail_t = first(survivors[0], "failure")["t"] - zero
redone_t = first(survivors[0], "commit", first(survivors[0], "synced", fail_t + zero)["t"])["t"] - zero
end_t = max(e["t"] for es in events.values() for e in es) - zero
trained_t = min(first(pid, "synced")["t"] for pid in survivors) - zero
fig, (whole, training, zoom) = plt.subplots(3, 1, figsize=(10, 9), gridspec_kw={"height_ratios": [1, 1, 1]})
draw(whole, -0.1, end_t + 0.1, detail=False)
whole.set_title(f"An elastic job, measured: rank 2 SIGKILLed in step {KILL_STEP}, a newcomer joins at the "
                f"commit of step {stopped['step']}", fontsize=10)
whole.set_xlabel("seconds since the launch (a tick: a step; before the workers start, the launcher starts)",
                 fontsize=8)
whole.legend(handles=[Patch(color=COLOUR[3], label="a step at 3 workers"), Patch(color=COLOUR[2], label="at 2"),
                      Patch(color=SHADE["start-up"][0], alpha=SHADE["start-up"][1], label="start-up"),
                      Patch(color=SHADE["failure"][0], alpha=SHADE["failure"][1],
                            label="failure: roll back, rebuild, sync"),
                      Patch(color=SHADE["join"][0], alpha=SHADE["join"][1], label="asked to join: round, sync"),
                      Patch(color=SHADE["waiting"][0], alpha=SHADE["waiting"][1], label="waiting")],
             fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False)
draw(training, trained_t - 0.1, end_t + 0.1, detail=False)
training.axvspan(fail_t - 0.25, redone_t + 0.25, color="tab:red", alpha=0.06)
training.set_title("The training part of it", fontsize=9)
draw(zoom, fail_t - 0.25, redone_t + 0.25, detail=True)
zoom.set_title("Zoom on the failure (shaded above): steps as bars, commits in black", fontsize=9)
zoom.set_xlabel("seconds since the launch", fontsize=8)
fig.tight_layout()
path = os.path.join(out_dir, "elastic_timeline.png")
fig.savefig(path, dpi=100)
plt.close(fig)
assert os.path.getsize(path) > 0
print(f"\nthe measured timeline, one row per worker: {path}")

# =============================================================================================
section("4. What it costs: a commit per step, or a restart from a checkpoint")
# =============================================================================================
COST = r'''
"""Tutorial 12's cost of a commit: one worker under minidl.dist.run times DDP training steps of an MLP with
Adam at a few batch sizes, and the state.commit() after each (every SAVE_EVERY-th also a distributed
checkpoint); writes [[batch, step s, commit s, saved], ...] to OUT/cost.json."""
import json
import os
import sys
import time

import minidl
from minidl import nn
from minidl.dist import elastic
from minidl.nn.parallel import DistributedDataParallel

WIDTH, REPEAT, SAVE_EVERY = 512, 8, 4
minidl.manual_seed(0)
model = nn.Sequential(nn.Linear(256, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH), nn.Tanh(),
                      nn.Linear(WIDTH, 10)).double()
optimizer = minidl.optim.Adam(model.parameters(), lr=1e-3)
state = elastic.State(model, optimizer, save_every=SAVE_EVERY, checkpoint_dir=sys.argv[1], step=0)


@elastic.run
def measure(state):
    ddp = DistributedDataParallel(state.model)
    found = []
    for batch in (8, 64, 512):
        x, y = minidl.randn(batch, 256, dtype=minidl.float64), minidl.randn(batch, 10, dtype=minidl.float64)
        for _ in range(REPEAT):
            began = time.perf_counter()
            optimizer.zero_grad()
            ((ddp(x) - y) ** 2).mean().backward()
            optimizer.step()
            stepped = time.perf_counter()
            state.step += 1
            state.commit()
            found.append([batch, stepped - began, time.perf_counter() - stepped, state.commits % SAVE_EVERY == 0])
    return found


found = measure(state)
with open(os.path.join(os.environ["OUT"], "cost.json"), "w") as f:
    json.dump({"times": found, "bytes": sum(p.numel() * 8 for p in model.parameters()), "commits": state.commits}, f)
'''
cost_script, checkpoints = os.path.join(work, "cost.py"), os.path.join(work, "checkpoints")
with open(cost_script, "w") as f:
    f.write(COST)
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
run = subprocess.run([sys.executable, "-m", "minidl.dist.run", "--rdzv-backend", "static", "--master-port", str(port),
                      "--rdzv-id", "tutorial-12-cost", "--nproc-per-node", "1", cost_script, checkpoints],
                     env=dict(env, OUT=work), capture_output=True, text=True, timeout=300)
assert run.returncode == 0, run.stdout + run.stderr
with open(os.path.join(work, "cost.json")) as f:
    cost = json.load(f)
commits, state_bytes = cost["commits"], cost["bytes"]
saved = sorted(int(name.split("-")[1]) for name in os.listdir(checkpoints))
assert commits == 24 and saved == [4, 8, 12, 16, 20, 24]        # every 4th commit a checkpoint, commit-<n>
assert all(os.path.exists(os.path.join(checkpoints, f"commit-{n}", ".metadata")) for n in saved)
print(f"One worker, an MLP 256-512-512-10 in float64 ({state_bytes / 2 ** 20:.1f} MiB of weights) with Adam: "
      f"each commit\ncopies the weights and Adam's two moments, {3 * state_bytes / 2 ** 20:.1f} MiB, in host memory "
      f"(and keeps that copy). Medians\nof 8 steps per batch size; every 4th commit also wrote a distributed "
      f"checkpoint (State(save_every=4)):\n")
print(f"{'batch':>6} {'step ms':>9} {'commit ms':>10} {'commit/step':>12} {'commit + save ms':>17}")
for batch in (8, 64, 512):
    rows_ = [t for t in cost["times"] if t[0] == batch]
    step_ms = 1e3 * np.median([s for _, s, _, _ in rows_])
    commit_ms = 1e3 * np.median([c for _, _, c, saved_ in rows_ if not saved_])
    save_ms = 1e3 * np.median([c for _, _, c, saved_ in rows_ if saved_])
    print(f"{batch:>6} {step_ms:>9.2f} {commit_ms:>10.2f} {commit_ms / step_ms:>12.2f} {save_ms:>17.1f}")
recovered = first(survivors[0], "synced", fail_t + zero)["t"] - zero - fail_t
print(f"""
(Measured, not asserted.) A commit costs a copy of the state, whatever the batch; a step costs in
proportion to the batch. With a small batch per rank the commit is a large part of a step;
committing every N steps divides its cost by N and, after a failure, redoes up to N - 1 more steps.
The network is hardly involved (two small store calls ask whether a newcomer waits), and nothing is
written.

The other way to survive a failure: the launcher restarts the whole job (minidl.dist.run
--max-restarts, --nnodes MIN:MAX), every worker starting again from the newest distributed checkpoint
(State(save_every=M, checkpoint_dir=...) writes one every M commits, and elastic.run loads the newest
commit-<n> when the job starts again; that is also the way out when the world shrinks below MIN).
That route pays, per failure, a whole new set of processes (the workers above took {min(start_up.values()):.1f} s to
start Python, import and form their group: the grey bars, paid again by every worker), the load,
and the steps since the last save (up to M commits' worth); and all along, a checkpoint written every
M commits (the 'commit + save' column: the disk and the checksums). In the job, the survivors stay
the processes they are: they lose the steps since the last commit and a round ({1e3 * recovered:.0f} ms
here, from the failure to training again). Both routes keep every committed step, and a job uses
both: commits in memory for the failures it can survive, checkpoints for those it cannot (the
launcher or its store dying, too few workers left).""")

print(f"\nAll claims checked ({time.perf_counter() - began:.1f} s).")
