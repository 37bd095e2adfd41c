"""Optimizer steps on DTensor parameters: a parameter's gradient and state lie as the parameter does (a
gradient's Partial as Replicate), so each rank steps its own pieces, in place, with no message — the fused
steps (one parameter, or a list of them in one launch) run on the pieces; their state starts as ``zeros_like``/
``empty_like``/``full_like``/``ones_like`` of the parameter, a DTensor placed alike. Which rows a rank holds does not
matter to them: a _StridedShard (FSDP2's over tensor parallelism) is taken as it lies."""
from __future__ import annotations

from ....ops.registry import attach_rule
from .._dispatch import dtensors
from ..placement_types import Replicate


def in_place_on_pieces(args, kwargs):
    """Every DTensor argument as it lies; nothing returned (the op writes the pieces)."""
    return [d.placements for d in dtensors(args, kwargs)], None, None


def like_rule(args, kwargs):
    """A new tensor placed as ``x`` (whole where x is a partial sum: a filled value is not split), of its global
    shape."""
    x = args[0]
    return [x.placements], tuple(Replicate() if p.is_partial() else p for p in x.placements), tuple(x.shape)


in_place_on_pieces.takes_strided = like_rule.takes_strided = True
for _name in ("_fused_sgd_step_", "_fused_adam_step_", "_fused_sgd_steps_", "_fused_adam_steps_",
              "_fused_adagrad_steps_"):
    attach_rule(_name, "sharding", in_place_on_pieces)
for _name in ("zeros_like", "empty_like", "full_like", "ones_like"):
    attach_rule(_name, "sharding", like_rule)
