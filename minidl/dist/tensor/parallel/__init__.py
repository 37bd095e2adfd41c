"""minidl.dist.tensor.parallel: tensor and sequence parallelism by torch's parallel styles.

    tp = init_device_mesh("cpu", (2,))
    parallelize_module(model, tp, {"layers.*.mlp.up": ColwiseParallel(), "layers.*.mlp.down": RowwiseParallel()})

``style.py`` holds the styles (how one module is split and its inputs and outputs laid out), ``api.py`` the
plan's application, ``loss.py`` the class-split cross-entropy. Everything runs on DTensors and their ops'
sharding rules: a style only places parameters and moves activations.
"""
from .api import parallelize_module
from .loss import loss_parallel
from .style import (ColwiseParallel, ParallelStyle, PrepareModuleInput, PrepareModuleInputOutput,
                    PrepareModuleOutput, RowwiseParallel, SequenceParallel)

__all__ = ["ColwiseParallel", "ParallelStyle", "PrepareModuleInput", "PrepareModuleInputOutput",
           "PrepareModuleOutput", "RowwiseParallel", "SequenceParallel", "parallelize_module", "loss_parallel"]
