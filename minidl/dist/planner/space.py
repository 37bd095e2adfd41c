"""The plans: every way to lay a world of ranks out as data x pipeline x tensor parallel, and the choices within.

A ``Layout`` is dp x pp x tp = world size ranks, with

- ``shard``: how the dp ranks hold the model — "ddp" (whole replicas, gradients all-reduced), "zero" (ZeRO-1:
  DDP plus a ZeroRedundancyOptimizer, each rank stepping a share) or "fsdp" (``fully_shard`` on each block and
  the root: parameters, gradients and state 1/dp per rank);
- ``schedule`` and ``microbatches`` for pp > 1: "gpipe" or "1f1b" (one stage per rank), "interleaved-1f1b" or
  "zero-bubble" (two stages per rank; zero bubble splits each backward into the input's and the weights'
  gradients, the weights' filling the idle time) over m = pp, 2 pp or 4 pp micro-batches (those
  that divide each data-parallel rank's rows; more only lengthen the step where a micro-batch's fixed costs
  dominate, as on a CPU), or the m the user fixed (at least pp).

``layouts`` enumerates them for a model of n blocks and a batch of B rows, keeping the ones the user fixed
(semi-automatic: any of the keywords), and says why the others cannot be used.
"""
from __future__ import annotations

from dataclasses import dataclass

SHARDS = ("ddp", "zero", "fsdp")
SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zero-bubble")
VIRTUAL = {"interleaved-1f1b": 2, "zero-bubble": 2}   # stages per rank (the others: one)


@dataclass(frozen=True)
class Layout:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    shard: str = "ddp"
    schedule: str | None = None
    microbatches: int = 1

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    def shape(self, batch) -> tuple:
        """(tensor-parallel degree, rows per micro-batch, fully_shard degree): what the layout runs its blocks at,
        for a global batch of ``batch`` rows (the profile's key)."""
        return self.tp, batch // self.dp // self.microbatches, self.dp if self.shard == "fsdp" else 1

    @property
    def stages(self) -> int:
        """Pipeline stages: pp, or 2 pp for the interleaved schedules (stage s on rank s % pp)."""
        return self.pp * VIRTUAL.get(self.schedule, 1)

    @property
    def mesh_dim_names(self) -> tuple:
        """The mesh's dimensions of more than one rank, in the order dp, pp, tp (tp innermost: its ranks the
        closest, as its collectives are the most frequent)."""
        return tuple(n for n in ("dp", "pp", "tp") if getattr(self, n) > 1)

    @property
    def mesh_shape(self) -> tuple:
        return tuple(getattr(self, n) for n in self.mesh_dim_names) or (1,)

    def __str__(self):
        parts = []
        if self.dp > 1:
            parts.append(f"{self.shard}{self.dp}")
        if self.pp > 1:
            parts.append(f"pp{self.pp} {self.schedule} m{self.microbatches}")
        if self.tp > 1:
            parts.append(f"tp{self.tp}")
        return " x ".join(parts) or "one rank"


def divisors(n) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(world_size, num_blocks, batch, tp_degrees, fixed) -> tuple:
    """(the usable Layouts, [reasons the others were not]) for ``world_size`` ranks, a chain of ``num_blocks``
    blocks (the loss not counted), a batch of ``batch`` rows, tensor parallelism possible at ``tp_degrees`` (1
    always), and the user's ``fixed`` choices {dp, tp, pp, shard, schedule, microbatches}."""
    found, why = [], []
    for tp in divisors(world_size):
        for pp in divisors(world_size // tp):
            dp = world_size // (tp * pp)
            degrees = {"dp": dp, "tp": tp, "pp": pp}
            clash = [f"{k}={fixed[k]}" for k in degrees if fixed.get(k) not in (None, degrees[k])]
            if clash:
                continue
            name = f"dp {dp} x pp {pp} x tp {tp}"
            if tp not in tp_degrees:
                why.append(f"{name}: no tensor-parallel plan splits the model over {tp} ranks")
                continue
            if pp > num_blocks:
                why.append(f"{name}: {num_blocks} blocks cannot make {pp} pipeline stages")
                continue
            if batch % dp:
                why.append(f"{name}: the batch of {batch} rows does not split over {dp} data-parallel ranks")
                continue
            rows = batch // dp
            shards = SHARDS if dp > 1 else ("ddp",)
            schedules = SCHEDULES if pp > 1 else (None,)
            offered = (pp, 2 * pp, 4 * pp) if fixed.get("microbatches") is None else (fixed["microbatches"],)
            counts = [m for m in offered if rows % m == 0 and m >= pp] if pp > 1 else [1]
            if not counts:
                why.append(f"{name}: {rows} rows per data-parallel rank do not make {' or '.join(map(str, offered))} "
                           f"equal micro-batches of at least one per stage")
                continue
            for shard in shards:
                if shard == "fsdp" and pp > 1:
                    why.append(f"{name}: fsdp with pipeline stages is not planned (each micro-batch would gather "
                               f"the stage's parameters again)")
                    continue
                if shard == "zero" and tp > 1:
                    why.append(f"{name}: zero with tensor parallelism is not planned (ZeroRedundancyOptimizer "
                               f"steps whole tensors, not tensor-parallel pieces)")
                    continue
                for schedule in schedules:
                    if pp * VIRTUAL.get(schedule, 1) > num_blocks:
                        why.append(f"{name} {schedule}: {num_blocks} blocks cannot make its "
                                   f"{pp * VIRTUAL[schedule]} stages")
                        continue
                    for m in counts:
                        if schedule in VIRTUAL and m % max(1, m // pp):
                            why.append(f"{name} {schedule} m{m}: the micro-batches do not split into rounds of pp")
                            continue
                        layout = Layout(dp, tp, pp, shard, schedule, m)
                        if all(fixed.get(k) in (None, getattr(layout, k)) for k in ("shard", "schedule",
                                                                                     "microbatches")):
                            found.append(layout)
    return found, why
