"""A plan made real: the calls a user would have written for its layout, on this rank.

``build`` takes the whole model (made alike on every rank) and the device mesh (dp, pp, tp: the layout's dimensions
of more than one rank) and, in torch's order of composition: cuts the pipeline stages this rank runs (the plan's
cut; stage s on rank s % pp), splits them over "tp" (``parallelize_module`` with the user's plan), spreads them over
"dp" (``DistributedDataParallel``, DDP with a ``ZeroRedundancyOptimizer``, or ``fully_shard`` on each block and the
root), wraps them in ``PipelineStage`` s and the schedule, and makes the optimizer. ``Parallelized.step`` then
trains on a global batch.
"""
from __future__ import annotations

import numpy as np

from minidl import nn

from .. import collectives, debug
from ..ddp import DistributedDataParallel, local_piece
from ..fsdp import fully_shard
from ..optim import ZeroRedundancyOptimizer
from ..pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B,
                          ScheduleInterleavedZeroBubble)
from ..state import get_rank, new_group
from ..tensor.parallel import parallelize_module
from .blocks import block_plan, chain_of, sharing

MULTI = {"interleaved-1f1b": ScheduleInterleaved1F1B, "zero-bubble": ScheduleInterleavedZeroBubble}
SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, **MULTI}


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
        held, losses = self.schedule._stages, []
        if 0 in held:
            self.schedule.step(*inputs)
        elif self.layout.stages - 1 in held:
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


def _tied_groups(blocks, bounds, mesh, layout, pp_rank) -> list:
    """[((stage, name in its module), group)] for this rank's parameters that other ranks' stages hold too (stage
    s on rank s % pp): each such set of ranks gets a group per (dp, tp) position (every rank makes every group,
    in the same order)."""
    holders = {}
    for s, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        for i in range(a, b):
            for name, p in blocks[i].named_parameters():
                where, ranks = holders.setdefault(id(p), ({}, set()))
                where.setdefault(s % layout.pp, (s, f"{i - a}.{name}"))
                ranks.add(s % layout.pp)
    pp_dim = mesh.mesh_dim_names.index("pp")
    rows = np.moveaxis(np.array(mesh.mesh.tolist()), pp_dim, -1).reshape(-1, mesh.size(pp_dim))
    found, me = [], get_rank()
    for where, ranks in holders.values():
        ranks = sorted(ranks)
        if len(ranks) < 2:
            continue
        for row in rows:
            group = new_group([int(row[r]) for r in ranks])
            if pp_rank in ranks and me in row:
                found.append((where[pp_rank], group))
    return found


def build(plan, model, mesh) -> Parallelized:
    """``plan``'s layout of ``model`` on ``mesh`` (see the module's docstring)."""
    layout, blocks = plan.layout, chain_of(model)
    if [tuple(p.shape) for p in model.parameters()] != plan.shapes:
        raise ValueError(f"Plan.apply: the model is not the one planned (its parameters' shapes differ from the "
                         f"{len(plan.shapes)} planned); apply the plan to the same architecture")
    if layout.pp > 1:
        return _pipelined(plan, blocks, mesh)
    if layout.tp > 1:
        parallelize_module(model, mesh["tp"], _plan_of(blocks, 0, len(blocks), plan.tp_plan))
    run = model
    if layout.dp > 1 and layout.shard == "fsdp":   # (the groups model.fsdp_groups prices)
        shared, done = sharing(blocks), set()
        for i, block in enumerate(blocks):
            if i not in shared and id(block) not in done and any(True for _ in block.parameters()):
                fully_shard(block, mesh=mesh["dp"])
                done.add(id(block))
        fully_shard(model, mesh=mesh["dp"])
    elif layout.dp > 1:
        run = DistributedDataParallel(model, device_mesh=mesh["dp"], broadcast_buffers=False)
    return Parallelized(layout, run, _optimizer(plan, mesh, run.parameters()), None, plan.loss_fn, mesh, [])


def _pipelined(plan, blocks, mesh) -> Parallelized:
    """This rank's stages (s = its pp coordinate, + pp, ...), each split over "tp", replicated over "dp" (DDP),
    in a PipelineStage; the schedule over them; tied parameters' groups."""
    layout, bounds = plan.layout, plan.prediction.bounds
    pp_rank = dict(zip(layout.mesh_dim_names, mesh.get_coordinate()))["pp"]
    tied = _tied_groups(blocks, bounds, mesh, layout, pp_rank)
    stages, modules = [], {}
    for s in range(pp_rank, layout.stages, layout.pp):
        a, b = bounds[s], bounds[s + 1]
        modules[s] = module = nn.Sequential(*blocks[a:b])
        if layout.tp > 1:
            parallelize_module(module, mesh["tp"], _plan_of(blocks, a, b, plan.tp_plan))
        run = DistributedDataParallel(module, device_mesh=mesh["dp"], broadcast_buffers=False) \
            if layout.dp > 1 else module
        stages.append(PipelineStage(run, s, layout.stages, "cpu", group=mesh["pp"].get_group()))
    tied = [(dict(modules[s].named_parameters())[name], group) for (s, name), group in tied]
    params = list({id(p): p for stage in stages for p in stage.submod.parameters()}.values())
    kind = SCHEDULES[layout.schedule]
    schedule = kind(stages if layout.schedule in MULTI else stages[0], layout.microbatches, loss_fn=plan.loss_fn)
    run = stages[0].submod if len(stages) == 1 else nn.ModuleList([stage.submod for stage in stages])
    return Parallelized(layout, run, _optimizer(plan, mesh, params), schedule, plan.loss_fn, mesh, tied)


def _optimizer(plan, mesh, params):
    """The plan's optimizer on ``params``; ZeRO's over the data-parallel group."""
    params = list(params)
    if plan.layout.dp > 1 and plan.layout.shard == "zero":
        return ZeroRedundancyOptimizer(params, plan.optimizer_class, process_group=mesh["dp"].get_group(),
                                       **plan.optimizer_kwargs)
    return plan.optimizer_class(params, **plan.optimizer_kwargs)
