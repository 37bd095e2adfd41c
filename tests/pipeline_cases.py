"""Pipeline cases shared by the sim tests and the mpiexec script: each returns failure strings.

The spec: a pipelined step over p stages and m micro-batches gives the gradients and per-micro-batch
losses of one process running the whole model on the same micro-batches (float64, to 1e-10), and
several optimizer steps give the same weights. Every rank builds that reference itself.
"""
import numpy as np

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist.pipelining import (PipelineScheduleMulti, PipelineStage, Schedule1F1B, ScheduleGPipe,
                                    ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble, TensorChunkSpec)
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


def case_interleaved(rank, size, schedule_cls, m, batch, steps, per_rank=2):
    """An interleaved schedule with ``per_rank`` stages on each rank (stages rank, rank + size, ...)."""
    name = f"{schedule_cls.__name__} p={size} stages={per_rank * size} m={m} batch={batch} steps={steps}"
    num_stages = per_rank * size
    full = model(num_stages)
    mine = [rank + k * size for k in range(per_rank)]
    stages = [PipelineStage(full[s], s, num_stages, "cpu") for s in mine]
    schedule = schedule_cls(stages, m, loss_fn=F.mse_loss)
    params = [p for s in mine for p in full[s].parameters()]
    opt = minidl.optim.SGD(params, lr=0.1)
    x, y = data(batch)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        inputs = (x,) if rank == 0 else ()
        last = dict(target=y, losses=losses) if (num_stages - 1) in mine else {}
        schedule.step(*inputs, **last)
        grads = [p.grad.clone() for p in params]
        opt.step()
    ref = model(num_stages)
    ref_losses, ref_grads, _ = reference(ref, x, y, m, steps)
    ref_params = [p for s in mine for p in ref[s].parameters()]
    per_block = len(list(ref[0].parameters()))
    ref_grads = [g for s in mine for g in ref_grads[s * per_block:(s + 1) * per_block]]
    failures = []
    if not all(close(g.numpy(), r.numpy()) for g, r in zip(grads, ref_grads)):
        failures.append(f"{name}: gradients differ on rank {rank}")
    if not all(close(p.detach().numpy(), r.detach().numpy()) for p, r in zip(params, ref_params)):
        failures.append(f"{name}: weights differ on rank {rank}")
    if (num_stages - 1) in mine and not close([l.item() for l in losses], ref_losses):
        failures.append(f"{name}: losses differ")
    return failures


def case_pipeline_times_data_parallel(rank, size, schedule_cls, m, dw_builder=None):
    """4 ranks as 2 stages x 2 replicas (rank = replica * 2 + stage): each replica pipelines half of
    the batch, and each stage's module, wrapped in DistributedDataParallel over its replica group,
    averages its gradients once per step (also when a dw_builder makes I a full backward). Equal
    to one process on the whole batch."""
    from minidl.nn.parallel import DistributedDataParallel as DDP
    replica, stage_index = divmod(rank, 2)
    pipes = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    replicas = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    full = model(2)
    block = full[stage_index]
    stage = PipelineStage(DDP(block, process_group=replicas[stage_index]), stage_index, 2, "cpu",
                          group=pipes[replica], dw_builder=dw_builder)
    schedule = schedule_cls([stage] if issubclass(schedule_cls, PipelineScheduleMulti) else stage, m,
                            loss_fn=F.mse_loss)
    x, y = data(8 * m)
    half = 4 * m
    mine_x, mine_y = x[replica * half:(replica + 1) * half], y[replica * half:(replica + 1) * half]
    losses = []
    schedule.step(mine_x) if stage_index == 0 else schedule.step(target=mine_y, losses=losses)
    grads = [q.grad.clone() for q in block.parameters()]
    ref = model(2)
    _, ref_grads, _ = reference(ref, x, y, 2 * m)   # (2 replicas x m micro-batches of equal size)
    n = len(grads)
    ref_grads = ref_grads[stage_index * n:(stage_index + 1) * n]
    if not all(close(g.numpy(), r.numpy()) for g, r in zip(grads, ref_grads)):
        return [f"{schedule_cls.__name__} 2 stages x 2 replicas m={m}{' (dw_builder)' if dw_builder else ''}: "
                f"gradients differ on rank {rank}"]
    return []


def run_all(rank, size):
    failures = []
    for schedule_cls in (ScheduleGPipe, Schedule1F1B):
        for m in (size, 2 * size):
            failures += case_equivalence(rank, size, schedule_cls, m, 2 * m, steps=1)
        failures += case_equivalence(rank, size, schedule_cls, 2 * size, 4 * size + 1, steps=3)  # uneven, 3 steps
    failures += case_eval_and_chunk_spec(rank, size)
    for schedule_cls in (ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble):
        for m in (size, 2 * size):
            failures += case_interleaved(rank, size, schedule_cls, m, 2 * m, steps=2)
    if size == 4:
        for schedule_cls in (ScheduleGPipe, Schedule1F1B, ScheduleInterleavedZeroBubble):
            failures += case_pipeline_times_data_parallel(rank, size, schedule_cls, 2)
        failures += case_pipeline_times_data_parallel(rank, size, ScheduleInterleavedZeroBubble, 2,
                                                      dw_builder=lambda: lambda: None)
    dist.barrier()
    return failures
