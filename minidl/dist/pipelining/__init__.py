"""``minidl.dist.pipelining``: pipeline parallelism with ``torch.distributed.pipelining``'s names.

Each rank builds its stage by hand from a module boundary and runs a schedule::

    stage = PipelineStage(my_layers, rank, world_size, device="cpu")
    schedule = Schedule1F1B(stage, n_microbatches=8, loss_fn=F.cross_entropy)
    if rank == 0:
        schedule.step(x)                                  # the first stage gets the batch
    elif rank == world_size - 1:
        out = schedule.step(target=y, losses=losses)      # the last one the target
    else:
        schedule.step()

A schedule is each rank's list of actions (``schedule.table()`` prints it, checked before it
runs, and ``schedule.dumps()`` writes it in a text format that ``ScheduleFromText`` runs, see
``pipelining.text``); ``schedule.timeline()`` gives what each action really took and the measured bubble, and
``draw(timeline, "pipeline.png")`` pictures it beside the plan (with matplotlib).
"""
from .cost import best_cut, split_by_cost
from .picture import draw
from .microbatch import TensorChunkSpec, merge_chunks, split_args_kwargs_into_chunks
from .schedules import (PipelineError, PipelineScheduleMulti, PipelineScheduleSingle, Schedule1F1B, ScheduleFromText,
                        ScheduleGPipe, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble, bubble)
from .stage import PipelineStage

__all__ = ["PipelineError", "PipelineScheduleMulti", "PipelineScheduleSingle", "PipelineStage", "Schedule1F1B",
           "ScheduleFromText", "ScheduleGPipe", "ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble",
           "TensorChunkSpec", "best_cut", "bubble",
           "draw", "merge_chunks", "pipe_split", "pipeline", "split_args_kwargs_into_chunks", "split_by_cost"]


def _no_tracing(name):
    def refuse(*args, **kwargs):
        raise NotImplementedError(
            f"minidl.dist.pipelining.{name}: splitting a model by tracing its forward is not supported; build each "
            f"rank's stage by hand from a module boundary: PipelineStage(submodule, stage_index, num_stages, device)")
    refuse.__name__ = name
    return refuse


pipe_split = _no_tracing("pipe_split")
pipeline = _no_tracing("pipeline")
