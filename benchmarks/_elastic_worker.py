"""One worker of benchmarks/elastic.py: an MLP trained by DDP under minidl.dist.elastic (float32, a commit after
every step), which writes time stamps (time.time(): every worker is on this machine) as JSON lines into
OUT/events-<pid>.jsonl, one write each, so a SIGKILL loses none written before it:

    begin     the process started (before its imports)
    fault     MINIDL_FAULT fires here (this worker is the victim: its own last stamp before the kill or stop)
    start     a step begins (forward)            commit    the step is committed
    raised    a collective raised DistError      group     the new group is up (elastic's reset callback)
    synced    the state is synced (train is entered, at round 0 too)
    refused   the group cannot go on (MembershipError: too few workers left; the launcher may restart)

Each line also holds the launcher's attempt and this process's rank at the start. Env: OUT, STEPS, HIDDEN (the
width of the MLP), and, for the restart case, CKPT and SAVE_EVERY (State's checkpoint_dir and save_every)."""
import time

BEGIN = time.time()

import json   # noqa: E402  (after the stamp: imports take a while)
import os   # noqa: E402

import numpy as np   # noqa: E402

import minidl   # noqa: E402
import minidl.dist as dist   # noqa: E402
from minidl import nn   # noqa: E402
from minidl.dist import elastic, faults   # noqa: E402
from minidl.dist.communicators.base import DistError   # noqa: E402

IN, OUT_FEATURES, GLOBAL_BATCH, SAMPLES = 256, 10, 48, 960   # 48: split evenly among 3, 2 or 1 workers
BUCKET_MB = 25   # DDP's default, named so that the benchmark counts the all-reduces of a step alike


def build_model(hidden: int):
    minidl.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, OUT_FEATURES))


def all_reduces_per_step(hidden: int) -> int:
    """DDP's buckets for this model: each is one all-reduce in every backward."""
    from minidl.dist.reducer import assign_buckets
    return len(assign_buckets(list(build_model(hidden).parameters()), BUCKET_MB * 1024 * 1024))


def main():
    attempt, first_rank = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), int(os.environ["RANK"])
    log = os.open(os.path.join(os.environ["OUT"], f"events-{os.getpid()}.jsonl"),
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def note(event, t=None, **fields):
        line = {"ev": event, "t": time.time() if t is None else t, "attempt": attempt, "rank": first_rank, **fields}
        os.write(log, (json.dumps(line) + "\n").encode())

    note("begin", t=BEGIN)
    fire = faults.fire

    def noted_fire(fault, rank, size):
        note("fault", do=fault.do, at=fault.where)
        fire(fault, rank, size)
    faults.fire = noted_fire

    steps, hidden = int(os.environ["STEPS"]), int(os.environ["HIDDEN"])
    rng = np.random.RandomState(0)
    x_all = rng.randn(SAMPLES, IN).astype(np.float32)
    y_all = rng.randint(0, OUT_FEATURES, SAMPLES)
    model = build_model(hidden)
    opt = minidl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    saving = {"checkpoint_dir": os.environ["CKPT"], "save_every": int(os.environ["SAVE_EVERY"])} \
        if "CKPT" in os.environ else {}
    state = elastic.State(model, opt, sampler=elastic.ElasticSampler(list(range(SAMPLES)), seed=1), step=0,
                          **saving)
    state.register_reset_callbacks([lambda: note("group", world=dist.get_world_size())])

    @elastic.run
    def train(state):
        world = dist.get_world_size()
        note("synced", step=state.step, world=world)
        ddp = minidl.nn.parallel.DistributedDataParallel(state.model, bucket_cap_mb=BUCKET_MB)
        per_rank = GLOBAL_BATCH // world
        try:
            while state.step < steps:
                indices = list(state.sampler)   # this rank's share of what is left of the epoch
                for start in range(0, len(indices) - per_rank + 1, per_rank):
                    note("start", step=state.step, world=world)
                    idx = indices[start:start + per_rank]
                    opt.zero_grad()
                    loss = nn.functional.cross_entropy(ddp(minidl.from_numpy(x_all[idx])),
                                                       minidl.from_numpy(y_all[idx]))
                    loss.backward()
                    opt.step()
                    state.sampler.record_batch(per_rank)
                    state.step += 1
                    state.commit()
                    note("commit", step=state.step - 1, world=world)
                    if state.step >= steps:
                        break
                else:
                    state.sampler.set_epoch(state.sampler.epoch + 1)
        except DistError as e:
            note("raised", step=state.step, error=str(e)[:200])
            raise
        return state

    try:
        train(state)
    except elastic.MembershipError as e:
        note("refused", error=str(e)[:200])
        raise
    note("done", step=state.step, weights=float(np.abs(model[0].weight.detach().numpy()).sum()))


if __name__ == "__main__":
    main()
