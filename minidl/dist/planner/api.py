"""``minidl.dist.plan``: measure, enumerate, predict, rank — and hand back the best plan to apply."""
from __future__ import annotations

import math
import os
import pickle
import tempfile

import minidl

from .. import state
from ..device_mesh import init_device_mesh
from .blocks import chain_of, trace
from .build import build
from .model import predict
from .profile import measure
from .space import SCHEDULES, SHARDS, divisors, layouts


class Plan:
    """One layout with its predicted step time, memory and bytes; ``ranking``: every plan that fits, best first
    (this one among them); ``rejected``: why the other layouts were not planned."""

    def __init__(self, layout, prediction, settings):
        self.layout, self.prediction, self._settings = layout, prediction, settings
        self.ranking, self.rejected, self.profile = [self], [], None

    def __getattr__(self, name):   # loss_fn, tp_plan, optimizer_class, optimizer_kwargs, shapes
        if name.startswith("_") or name not in self._settings:
            raise AttributeError(name)
        return self._settings[name]

    def __repr__(self):
        p = self.prediction
        return (f"Plan({self.layout}: {p.seconds * 1e3:.1f} ms, peak {max(p.memory) / 1e6:.1f} MB, "
                f"{max(p.sent) / 1e6:.2f} MB sent per rank)")

    @property
    def mesh_shape(self):
        return self.layout.mesh_shape

    @property
    def mesh_dim_names(self):
        return self.layout.mesh_dim_names

    def table(self) -> str:
        """The ranking as text: plan, predicted step, bubble, peak memory and bytes sent per rank (the most of any
        rank), and where the time goes."""
        lines = [f"{'plan':<24}{'step ms':>9}{'bubble':>8}{'peak MB':>9}{'sent MB':>9}   "
                 f"{'compute+pipe':>12}{'collectives':>12}{'optimizer':>10}"]
        for p in self.ranking:
            q = p.prediction
            parts = [q.parts[k] * 1e3 for k in ("compute and pipeline", "collectives", "optimizer")]
            lines.append(f"{str(p.layout):<24}{q.seconds * 1e3:>9.2f}{q.bubble:>8.2f}{max(q.memory) / 1e6:>9.2f}"
                         f"{max(q.sent) / 1e6:>9.3f}   {parts[0]:>12.2f}{parts[1]:>12.2f}{parts[2]:>10.2f}")
        return "\n".join(lines)

    def apply(self, model, mesh=None):
        """The plan's layout of ``model`` (the same whole model on every rank) on ``mesh`` (None: made here from
        ``mesh_shape`` and ``mesh_dim_names``): a ``Parallelized`` with ``module``, ``optimizer``, ``schedule``
        and ``step(*inputs, target=...)``. A collective: every rank calls it."""
        if self.layout.world_size == 1 and not state.is_initialized():
            return build(self, model, None)
        if not state.is_initialized() or state.get_world_size() != self.layout.world_size:
            raise RuntimeError(f"Plan.apply: the plan {self.layout} runs on {self.layout.world_size} ranks; "
                               f"initialise a process group of that many first (mpiexec -n "
                               f"{self.layout.world_size} ...)")
        if mesh is None:
            mesh = init_device_mesh("cpu", self.mesh_shape, mesh_dim_names=self.mesh_dim_names or None)
        elif tuple(mesh.mesh_dim_names or ()) != self.mesh_dim_names and self.mesh_dim_names:
            raise ValueError(f"Plan.apply: the mesh's dimensions {mesh.mesh_dim_names} are not the plan's "
                             f"{self.mesh_dim_names} (sizes {self.mesh_shape})")
        elif self.mesh_dim_names and tuple(mesh.shape) != self.mesh_shape:
            raise ValueError(f"Plan.apply: the mesh's sizes {tuple(mesh.shape)} are not the plan's {self.mesh_shape}")
        return build(self, model, mesh)


def plan(model, sample_inputs, world_size, *, loss_fn, target, memory_limit=None, tp_plan=None,
         optimizer_class=None, optimizer_kwargs=None, dp=None, tp=None, pp=None, shard=None, schedule=None,
         microbatches=None, log=print) -> Plan:
    """Plan the training of ``model`` (an ``nn.Sequential``) on ``world_size`` ranks and return the plan predicted
    fastest among those whose peak memory per rank is at most ``memory_limit`` bytes.

    ``sample_inputs``: a global batch (one tensor, rows first: what an nn.Sequential takes) and ``target`` its
    loss target;
    ``loss_fn(output, target)``; ``tp_plan``: parallelize_module's plan over the Sequential's names ("*" for any
    child), without which no plan splits tensors; ``optimizer_class``/``optimizer_kwargs``: the optimizer (AdamW
    by default). Fixing any of ``dp``, ``tp``, ``pp``, ``shard`` ("ddp", "zero", "fsdp"), ``schedule`` ("gpipe",
    "1f1b") or ``microbatches`` leaves the planner the rest (semi-automatic). The measurements run on the current
    process group if one of ``world_size`` ranks is initialised (every rank calls ``plan``), else on
    ``world_size`` local processes started for them. ``log`` gets the table (None: quiet)."""
    blocks = chain_of(model)
    sample = tuple(sample_inputs) if isinstance(sample_inputs, (tuple, list)) else (sample_inputs,)
    if len(sample) != 1:
        raise TypeError(f"plan: an nn.Sequential takes one input; got {len(sample)} sample inputs")
    fixed = dict(dp=dp, tp=tp, pp=pp, shard=shard, schedule=schedule, microbatches=microbatches)
    _check(world_size, sample, target, memory_limit, fixed)
    trace(blocks, sample[0], loss_fn, target)
    settings = dict(loss_fn=loss_fn, tp_plan=tp_plan, optimizer_class=optimizer_class or minidl.optim.AdamW,
                    optimizer_kwargs=dict(optimizer_kwargs or {}),
                    shapes=[tuple(p.shape) for p in model.parameters()])   # (apply checks it gets this model)
    batch = sample[0].shape[0]
    degrees = divisors(world_size) if tp_plan else [1]
    found, rejected = layouts(world_size, len(blocks), batch, degrees, fixed)
    if not found:
        raise ValueError(f"plan: no plan uses {world_size} ranks"
                         f"{' with ' + _said(fixed) if _said(fixed) else ''}:\n  " + "\n  ".join(rejected))
    shapes = {l.shape(batch) for l in found}
    # (a pipeline's messages go between pairs; a tied parameter's gradient is summed over 2 .. pp stages)
    sizes = sorted({k for l in found for k in (l.dp, l.tp, *range(2, l.pp + 1)) if k > 1})
    args = (blocks, sample, target, loss_fn, tp_plan, shapes, sizes, settings["optimizer_class"],
            settings["optimizer_kwargs"])
    profile = _measured(world_size, args)
    failed = {l: profile.blocks[l.shape(batch)] for l in found if isinstance(profile.blocks[l.shape(batch)], str)}
    rejected += [f"{l}: {why}" for l, why in failed.items()]
    found = [l for l in found if l not in failed]
    if not found:
        raise ValueError(f"plan: no plan uses {world_size} ranks:\n  " + "\n  ".join(rejected))
    plans = [Plan(l, predict(l, profile, batch), settings) for l in found]
    fitting = [p for p in plans if memory_limit is None or max(p.prediction.memory) <= memory_limit]
    if not fitting:
        smallest = min(plans, key=lambda p: max(p.prediction.memory))
        raise ValueError(f"plan: no plan fits memory_limit={memory_limit} bytes per rank; the smallest, "
                         f"{smallest.layout}, needs {max(smallest.prediction.memory)} bytes "
                         f"({max(smallest.prediction.memory) / 1e6:.1f} MB)")
    fitting.sort(key=lambda p: p.prediction.seconds)
    over = [f"{p.layout}: peak {max(p.prediction.memory) / 1e6:.1f} MB > the limit" for p in plans
            if p not in fitting]
    for p in fitting:
        p.ranking, p.rejected, p.profile = fitting, rejected + over, profile
    best = fitting[0]
    if log is not None:
        log(f"plan: {len(fitting)} plans on {world_size} ranks, ranked by predicted step time "
            f"({len(rejected) + len(over)} not planned)\n{best.table()}")
    return best


def _said(fixed) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in fixed.items() if v is not None)


def _check(world_size, sample, target, memory_limit, fixed) -> None:
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"plan: world_size must be a positive int, got {world_size!r}")
    if not sample or not all(isinstance(t, minidl.Tensor) and t.ndim >= 1 for t in sample):
        raise TypeError("plan: sample_inputs must be a tensor with the batch's rows first")
    if not isinstance(target, minidl.Tensor) or target.ndim < 1 or target.shape[0] != sample[0].shape[0]:
        raise ValueError(f"plan: target must be a tensor of the batch's {sample[0].shape[0]} rows, got "
                         f"{getattr(target, 'shape', target)!r}")
    if memory_limit is not None and not memory_limit > 0:
        raise ValueError(f"plan: memory_limit must be a positive number of bytes, got {memory_limit!r}")
    for key in ("dp", "tp", "pp", "microbatches"):
        if fixed[key] is not None and (not isinstance(fixed[key], int) or fixed[key] < 1):
            raise ValueError(f"plan: {key} must be a positive int, got {fixed[key]!r}")
    degrees = [fixed[k] for k in ("dp", "tp", "pp") if fixed[k] is not None]
    if world_size % math.prod(degrees):
        raise ValueError(f"plan: {_said({k: fixed[k] for k in ('dp', 'tp', 'pp')})} cannot make {world_size} ranks "
                         f"(dp x tp x pp = world_size)")
    if fixed["shard"] not in (None, *SHARDS):
        raise ValueError(f"plan: shard must be one of {SHARDS}, got {fixed['shard']!r}")
    if fixed["schedule"] not in (None, *SCHEDULES):
        raise ValueError(f"plan: schedule must be one of {SCHEDULES}, got {fixed['schedule']!r}")


# ------------------------------------------------------------------------------------------------ measuring
def _measured(world_size, args):
    """The Profile, measured on the current group (every rank calls plan) or on ``world_size`` processes started
    here for it."""
    if state.is_initialized():
        if state.get_world_size() != world_size:
            raise ValueError(f"plan: world_size={world_size}, but this process group has "
                             f"{state.get_world_size()} ranks; plan for the group's size, or call plan outside "
                             f"a process group (it then starts {world_size} processes to measure)")
        return measure(*args)
    from ... import multiprocessing
    try:
        pickle.dumps(args)
    except Exception as e:
        raise TypeError(f"plan: the model, sample, loss_fn and tp_plan travel to the {world_size} processes that "
                        f"measure by pickle, which failed ({e}); give a module-level loss_fn (not a lambda or a "
                        f"local function), or call plan on every rank of a process group") from e
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "profile.pkl")
        meet = f"file://{os.path.join(folder, 'store')}"
        multiprocessing.spawn(_probe, args=(world_size, meet, path, args), nprocs=world_size)
        with open(path, "rb") as f:
            return pickle.load(f)


def _probe(rank, world_size, meet, path, args):
    """One of the processes ``plan`` starts to measure on: join the group (through the file ``meet``), measure,
    rank 0 writes the result."""
    state.init_process_group("gloo", init_method=meet, rank=rank, world_size=world_size)
    try:
        profile = measure(*args)
        if rank == 0:
            with open(path, "wb") as f:
                pickle.dump(profile, f)
    finally:
        state.destroy_process_group()
