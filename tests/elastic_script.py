"""One worker of tests/test_elastic.py's jobs: least squares in float64 by DDP under minidl.dist.elastic,
a commit after every step. The global batch of each step is the next 24 samples of the epoch's order,
whatever the world size (the ElasticSampler splits what is left of the epoch), so a run whose membership
changes ends on the weights of a run that never failed (up to the order of the gradient's sum). Writes
its rank, [[step, world size], ...], weights (every parameter, flattened), the launcher's attempt and the step
its first train() call began at (past 0 when it resumed from a checkpoint) into OUT/done-<pid>.json.

Env: OUT, STEPS, SLEEP (seconds after each commit), HOLD_AT (a step after whose commit the workers wait for a
newcomer to ask to join); MODEL=two for Linear-Tanh-Linear (seeded, four
parameters) in place of one zeroed Linear; BUCKET_MB, DDP's bucket_cap_mb (tiny: a bucket per parameter, so
a step takes several all-reduces during backward); CKPT and SAVE_EVERY, a distributed checkpoint every
SAVE_EVERY commits into CKPT/commit-<n> (a restarted job resumes from the newest); RAISE_AFTER_LAST=R, rank R
raises a ValueError in train() after the last step, once every other worker has finished; LINGER=1, each worker
stays on after train() (as one saving its model would) until a newcomer's round is over; EXIT_AT=S, rank 1
calls sys.exit(3) in train() after step S's commit; RAISE_AFTER_TRAIN=R, rank R raises a RuntimeError after
train() returned (as a final export that fails would)."""
import json
import os
import sys
import time
import numpy as np

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist import elastic

STEPS = int(os.environ.get("STEPS", "12"))
rng = np.random.RandomState(0)
X = rng.randn(96, 5); W_TRUE = rng.randn(5, 1); Y = X @ W_TRUE
data = list(zip(X, Y))

if os.environ.get("MODEL") == "two":
    minidl.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1)).double()
else:
    model = nn.Linear(5, 1, bias=False).double()
    with minidl.no_grad():
        model.weight.zero_()
opt = minidl.optim.SGD(model.parameters(), lr=0.1)
sampler = elastic.ElasticSampler(data, shuffle=False)
saving = {"checkpoint_dir": os.environ["CKPT"], "save_every": int(os.environ["SAVE_EVERY"])} \
    if "CKPT" in os.environ else {}
state = elastic.State(model, opt, sampler=sampler, step=0, log=[], **saving)

started_at = []

def hold_for_a_newcomer(state):
    """Wait here (every rank) until a newcomer has asked to join, so that it joins while the job still runs
    however slowly it starts (the next commit then stops for it)."""
    deadline = time.monotonic() + 120
    while state.membership.store.add("minidl/elastic/waiting/count", 0) == 0:
        if time.monotonic() > deadline:
            raise RuntimeError("elastic_script: no newcomer asked to join within 120 s")
        time.sleep(0.02)


def until(condition, what):
    """Wait (polling the job's store) until ``condition()``; a RuntimeError after 120 s."""
    deadline = time.monotonic() + 120
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"elastic_script: {what} did not happen within 120 s")
        time.sleep(0.02)


def the_others_finished(state):
    store, me = state.membership.store, state.membership.uid
    return all(store.check([f"minidl/elastic/left/{u}"]) for u in state.membership.members if u != me)


def linger(state):
    """Stay on after train() until a newcomer's round (round 1: this job has no other) is over. A worker that
    round marked dead (a bug: it finished) stays on until the launcher ends it, as a worker still saving
    would be ended."""
    store = state.membership.store
    until(lambda: int(store.get("minidl/elastic/latest").decode()) >= 1, "a newcomer's round")
    until(lambda: not store.check([f"minidl/elastic/dead/{state.membership.uid}"]), "the launcher's SIGKILL")


if os.environ.get("RANK") == "0" and os.environ.get("MINIDL_ELASTIC_JOIN") != "1":   # (for a newcomer to find)
    with open(os.path.join(os.environ["OUT"], "port.tmp"), "w") as f:
        f.write(os.environ["MASTER_PORT"])
    os.replace(os.path.join(os.environ["OUT"], "port.tmp"), os.path.join(os.environ["OUT"], "port"))


@elastic.run
def train(state):
    started_at.append(state.step)
    ddp = minidl.nn.parallel.DistributedDataParallel(state.model,
                                                     bucket_cap_mb=float(os.environ.get("BUCKET_MB", "25")))
    per_rank = 24 // dist.get_world_size()
    while state.step < STEPS:
        indices = list(state.sampler)          # this rank's share of what is left of the epoch
        for start in range(0, len(indices) - per_rank + 1, per_rank):
            idx = indices[start:start + per_rank]
            x = minidl.from_numpy(np.stack([X[i] for i in idx])); y = minidl.from_numpy(np.stack([Y[i] for i in idx]))
            opt.zero_grad()
            ((ddp(x) - y) ** 2).mean().backward()
            opt.step()
            state.sampler.record_batch(per_rank)
            state.log = state.log + [[state.step, dist.get_world_size()]]
            state.step += 1
            state.commit()
            time.sleep(float(os.environ.get("SLEEP", "0")))
            if state.step == int(os.environ.get("EXIT_AT", "-1")) and dist.get_rank() == 1:
                sys.exit(3)
            if state.step == int(os.environ.get("HOLD_AT", "-1")):
                hold_for_a_newcomer(state)
            if state.step >= STEPS:
                break
        else:
            state.sampler.set_epoch(state.sampler.epoch + 1)
    if os.environ.get("RAISE_AFTER_LAST") == str(dist.get_rank()):   # (past every collective of the others)
        until(lambda: the_others_finished(state), "the others finishing")
        raise ValueError("elastic_script: a bug after the last step")
    return state

train(state)
if os.environ.get("RAISE_AFTER_TRAIN") == str(dist.get_rank()):
    raise RuntimeError("elastic_script: an export after training failed")
weights = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
result = {"rank": dist.get_rank(), "log": state.log, "weights": weights.tolist(), "started_at": started_at[0],
          "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))}
with open(os.path.join(os.environ["OUT"], f"done-{os.getpid()}.json"), "w") as f:   # (one file each: lines interleave)
    json.dump(result, f)
if os.environ.get("LINGER") == "1":
    linger(state)
