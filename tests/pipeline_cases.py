"""Pipeline cases shared by the sim tests and the mpiexec script: each returns failure strings.

The spec: a pipelined step over p stages and m micro-batches gives the gradients and per-micro-batch
losses of one process running the whole model on the same micro-batches (float64, to 1e-10), and
several optimizer steps give the same weights. Every rank builds that reference itself.
"""
import numpy as np

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, TensorChunkSpec
from minidl.nn import functional as F

WIDTH = 6


def model(num_stages, seed=0):
    """num_stages blocks of Linear + Tanh (the last block ends in a Linear to 3 outputs), float64."""
    blocks = []
    for s in range(num_stages):
        last = s == num_stages - 1
        blocks.append(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, 3 if last else WIDTH)))
    net = nn.Sequential(*blocks).double()
    rs = np.random.RandomState(seed)  # (not minidl's generator: sim ranks are threads sharing it)
    with minidl.no_grad():
        for p in net.parameters():
            p.copy_(minidl.from_numpy(rs.uniform(-0.5, 0.5, tuple(p.shape))))
    return net


def data(batch, seed=1):
    rs = np.random.RandomState(seed)
    return minidl.from_numpy(rs.randn(batch, WIDTH)), minidl.from_numpy(rs.randn(batch, 3))


def reference(full, x, y, m, steps=1, lr=0.1):
    """One process: per-micro-batch mean losses, backward of their mean; weights after ``steps``."""
    opt = minidl.optim.SGD(full.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.arange(len(x)), m)])  # (numpy's split)
        chunks = [(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        losses = [F.mse_loss(full(xc), yc) for xc, yc in chunks]
        (sum(losses) / m).backward()
        grads = [p.grad.clone() for p in full.parameters()]
        opt.step()
    return [l.item() for l in losses], grads, [p.detach().clone() for p in full.parameters()]


def pipelined(rank, size, schedule_cls, m, batch, steps=1, lr=0.1):
    full = model(size)
    block = full[rank]
    stage = PipelineStage(block, rank, size, "cpu")
    schedule = schedule_cls(stage, m, loss_fn=F.mse_loss)
    opt = minidl.optim.SGD(block.parameters(), lr=lr)
    x, y = data(batch)
    losses, out = [], None
    for _ in range(steps):
        opt.zero_grad()
        losses = []
        if rank == 0 and size > 1:
            schedule.step(x)
        elif rank == size - 1:
            out = schedule.step(*((x,) if size == 1 else ()), target=y, losses=losses)
        else:
            schedule.step()
        grads = [p.grad.clone() for p in block.parameters()]
        opt.step()
    return [l.item() for l in losses], grads, [p.detach().clone() for p in block.parameters()], out, schedule


def close(a, b):
    return np.allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)


def case_equivalence(rank, size, schedule_cls, m, batch, steps):
    name = f"{schedule_cls.__name__} p={size} m={m} batch={batch} steps={steps}"
    losses, grads, weights, out, _ = pipelined(rank, size, schedule_cls, m, batch, steps)
    ref_full = model(size)
    x, y = data(batch)
    ref_losses, ref_grads, ref_weights = reference(ref_full, x, y, m, steps)
    mine = list(ref_full[rank].parameters())
    n = len(grads)
    ref_grads, ref_weights = ref_grads[rank * n:(rank + 1) * n], [p.detach() for p in mine]
    failures = []
    if not all(close(g.numpy(), r.numpy()) for g, r in zip(grads, ref_grads)):
        failures.append(f"{name}: gradients differ on stage {rank}")
    if not all(close(w.numpy(), r.numpy()) for w, r in zip(weights, ref_weights)):
        failures.append(f"{name}: weights differ on stage {rank}")
    if rank == size - 1:
        if not close(losses, ref_losses):
            failures.append(f"{name}: losses {losses} != {ref_losses}")
        if out is None or tuple(out.shape) != (batch, 3):
            failures.append(f"{name}: merged output {None if out is None else list(out.shape)}")
    return failures


def case_eval_and_chunk_spec(rank, size):
    """eval() is forward only; TensorChunkSpec(1) splits a (features, batch) input along dim 1."""
    full = model(size)

    class Transposed(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x.t())
    block = Transposed(full[0]) if rank == 0 else full[rank]
    stage = PipelineStage(block, rank, size, "cpu")
    schedule = ScheduleGPipe(stage, 2, loss_fn=F.mse_loss, args_chunk_spec=(TensorChunkSpec(1),))
    x, y = data(4)
    losses = []
    inputs = (x.t().contiguous(),) if rank == 0 else ()
    last = dict(target=y, losses=losses) if rank == size - 1 else {}
    out = schedule.eval(*inputs, **last)
    if rank == size - 1:
        want = model(size)(x)
        if out is None or not close(out.numpy(), want.detach().numpy()) or len(losses) != 2:
            return ["eval with TensorChunkSpec(1): output or losses differ on the last stage"]
        if any(p.grad is not None for p in block.parameters()):
            return ["eval left gradients"]
    return []


def run_all(rank, size):
    failures = []
    for schedule_cls in (ScheduleGPipe, Schedule1F1B):
        for m in (size, 2 * size):
            failures += case_equivalence(rank, size, schedule_cls, m, 2 * m, steps=1)
        failures += case_equivalence(rank, size, schedule_cls, 2 * size, 4 * size + 1, steps=3)  # uneven, 3 steps
    failures += case_eval_and_chunk_spec(rank, size)
    dist.barrier()
    return failures
