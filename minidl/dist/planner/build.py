"""A plan made real: the calls a user would have written for its layout, on this rank.

``build`` takes the whole model (made alike on every rank) and the device mesh (dp, pp, tp: the layout's
dimensions of more than one rank) and, in torch's order of composition: cuts the pipeline stage this rank runs
(the plan's cut), splits it over "tp" (``parallelize_module`` with the user's plan), spreads it over "dp"
(``DistributedDataParallel``, DDP with a ``ZeroRedundancyOptimizer``, or ``fully_shard`` on each block and the
root), wraps it in a ``PipelineStage`` and the schedule, and makes the optimizer. ``Parallelized.step`` then trains
on a global batch.
"""
from __future__ import annotations

import numpy as np

from minidl import nn

from .. import collectives, debug
from ..ddp import DistributedDataParallel, local_piece
from ..fsdp import fully_shard
from ..optim import ZeroRedundancyOptimizer
from ..pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from ..state import get_rank, new_group
from ..tensor.parallel import parallelize_module
from .blocks import block_plan, chain_of, sharing

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class Parallelized:
    """This rank's part of the model in the plan's layout: ``module`` (what it computes, wrapped as the layout
    wraps it), ``optimizer``, ``schedule`` (pipelined layouts) and ``step``."""

    def __init__(self, layout, module, optimizer, schedule, loss_fn, mesh, tied):
        self.layout, self.module, self.optimizer, self.schedule = layout, module, optimizer, schedule
        self.loss_fn, self.mesh, self._tied = loss_fn, mesh, tied
        self._dp_rank = dict(zip(layout.mesh_dim_names, mesh.get_coordinate())).get("dp", 0) if mesh else 0

    def sent_bytes(self) -> int:
        """Bytes this rank has sent on the plan's groups (its mesh's and the tied parameters'): debug.sent_bytes
        summed over them. Take differences around a step to compare with the plan's prediction."""
        if self.mesh is None:   # (one rank, no process group)
            return 0
        groups = {id(g): g for g in [self.mesh[n].get_group() for n in self.layout.mesh_dim_names]
                  + [g for _, g in self._tied]}
        return sum(debug.sent_bytes(g) for g in groups.values())

    def step(self, *inputs, target):
        """One training step on the global batch ``inputs`` (``target`` the loss's): this rank's data-parallel
        rows, forward, backward, the optimizer's step. Returns this rank's loss (the mean over its rows; on a
        pipeline, the mean of the micro-batches' losses on the last stage, None on the others)."""
        rows = inputs[0].shape[0] // self.layout.dp
        cut = slice(self._dp_rank * rows, (self._dp_rank + 1) * rows)
        inputs, target = tuple(t[cut] for t in inputs), target[cut]
        self.optimizer.zero_grad()
        if self.schedule is None:
            loss = self.loss_fn(self.module(*inputs), target)
            loss.backward()
            self.optimizer.step()
            return loss.item()
        stage = self.schedule._stages[next(iter(self.schedule._stages))]
        losses = []
        if stage.is_first:
            self.schedule.step(*inputs)
        elif stage.is_last:
            self.schedule.step(target=target, losses=losses)
        else:
            self.schedule.step()
        for param, group in self._tied:   # (a parameter on several stages: their gradients summed)
            collectives.all_reduce(local_piece(param.grad), group=group)
        self.optimizer.step()
        return sum(loss.item() for loss in losses) / len(losses) if losses else None


def _plan_of(blocks, a, b, tp_plan) -> dict:
    """The tensor-parallel plan for blocks a..b-1 as an nn.Sequential of them: each key naming its block (the
    wildcards' keys that name nothing in a block left out)."""
    plan = {}
    for i in range(a, b):
        for key, style in block_plan(tp_plan, i, blocks[i]).items():
            plan[f"{i - a}.{key}" if key else str(i - a)] = style
    return plan


def _tied_groups(blocks, bounds, mesh, stage_index) -> list:
    """[(name in this stage's module, group)] for this stage's parameters that other stages hold too: each such
    set of stages gets a group per (dp, tp) position (every rank makes every group, in the same order)."""
    holders = {}
    for s, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        for i in range(a, b):
            for name, p in blocks[i].named_parameters():
                names, stages = holders.setdefault(id(p), ({}, []))
                names.setdefault(s, f"{i - a}.{name}")
                stages.append(s)
    pp_dim = mesh.mesh_dim_names.index("pp")
    rows = np.moveaxis(np.array(mesh.mesh.tolist()), pp_dim, -1).reshape(-1, mesh.size(pp_dim))
    found, me = [], get_rank()
    for names, stages in holders.values():
        stages = sorted(set(stages))
        if len(stages) < 2:
            continue
        for row in rows:
            group = new_group([int(row[s]) for s in stages])
            if stage_index in stages and me in row:
                found.append((names[stage_index], group))
    return found


def build(plan, model, mesh) -> Parallelized:
    """``plan``'s layout of ``model`` on ``mesh`` (see the module's docstring)."""
    layout, blocks = plan.layout, chain_of(model)
    if [tuple(p.shape) for p in model.parameters()] != plan.shapes:
        raise ValueError(f"Plan.apply: the model is not the one planned (its parameters' shapes differ from the "
                         f"{len(plan.shapes)} planned); apply the plan to the same architecture")
    coordinate = dict(zip(layout.mesh_dim_names, mesh.get_coordinate())) if mesh else {}
    stage_index = coordinate.get("pp", 0)
    bounds = plan.prediction.bounds
    a, b = (bounds[stage_index], bounds[stage_index + 1]) if layout.pp > 1 else (0, len(blocks))
    tied = _tied_groups(blocks, bounds, mesh, stage_index) if layout.pp > 1 else []
    module = nn.Sequential(*blocks[a:b]) if layout.pp > 1 else model
    if layout.tp > 1:
        parallelize_module(module, mesh["tp"], _plan_of(blocks, a, b, plan.tp_plan))
    tied = [(dict(module.named_parameters())[name], group) for name, group in tied]
    run = module
    if layout.dp > 1 and layout.shard == "fsdp":   # (the groups model.fsdp_groups prices)
        shared, done = sharing(blocks), set()
        for i, block in enumerate(blocks):
            if i not in shared and id(block) not in done and any(True for _ in block.parameters()):
                fully_shard(block, mesh=mesh["dp"])
                done.add(id(block))
        fully_shard(module, mesh=mesh["dp"])
    elif layout.dp > 1:
        run = DistributedDataParallel(module, device_mesh=mesh["dp"], broadcast_buffers=False)
    params = list(run.parameters())
    if layout.dp > 1 and layout.shard == "zero":
        optimizer = ZeroRedundancyOptimizer(params, plan.optimizer_class, process_group=mesh["dp"].get_group(),
                                            **plan.optimizer_kwargs)
    else:
        optimizer = plan.optimizer_class(params, **plan.optimizer_kwargs)
    schedule = None
    if layout.pp > 1:
        stage = PipelineStage(run, stage_index, layout.pp, "cpu", group=mesh["pp"].get_group())
        schedule = SCHEDULES[layout.schedule](stage, layout.microbatches, loss_fn=plan.loss_fn)
    return Parallelized(layout, run, optimizer, schedule, plan.loss_fn, mesh, tied)
