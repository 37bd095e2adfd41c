"""One worker of tests/test_elastic.py's jobs: least squares in float64 by DDP under minidl.dist.elastic,
a commit after every step. The global batch of each step is the next 24 samples of the epoch's order,
whatever the world size (the ElasticSampler splits what is left of the epoch), so a run whose membership
changes ends on the weights of a run that never failed (up to the order of the gradient's sum). Writes
its rank, [[step, world size], ...] and weights into OUT/done-<pid>.json. Env: OUT, STEPS, SLEEP (seconds after
each commit)."""
import json
import os
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

model = nn.Linear(5, 1, bias=False).double()
with minidl.no_grad():
    model.weight.zero_()
opt = minidl.optim.SGD(model.parameters(), lr=0.1)
sampler = elastic.ElasticSampler(data, shuffle=False)
state = elastic.State(model, opt, sampler=sampler, step=0, log=[])

@elastic.run
def train(state):
    ddp = minidl.nn.parallel.DistributedDataParallel(state.model)
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
            if state.step >= STEPS:
                break
        else:
            state.sampler.set_epoch(state.sampler.epoch + 1)
    return state

train(state)
result = {"rank": dist.get_rank(), "log": state.log, "weights": model.weight.detach().numpy().ravel().tolist()}
with open(os.path.join(os.environ["OUT"], f"done-{os.getpid()}.json"), "w") as f:   # (one file each: lines interleave)
    json.dump(result, f)
