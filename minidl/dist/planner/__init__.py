"""Automatic parallelism: a cost model measured on the ranks that will train, and a planner that ranks every way
to lay the model out over them (data, sharded data, tensor and pipeline parallel) by its predicted step time.

    best = minidl.dist.plan(model, x, world_size=2, loss_fn=loss, target=y, tp_plan=plan, memory_limit=2e9)
    trainer = best.apply(model)          # the calls a user would have written for that layout
    loss = trainer.step(x, target=y)

``profile`` measures, ``model`` predicts, ``space`` enumerates, ``build`` applies, ``api`` ties them together.
"""
from .api import Plan, plan
from .space import Layout

__all__ = ["Layout", "Plan", "plan"]
