"""Tape autograd: grad modes, Function (the node of every op), and the backward engine."""
from .engine import WeightPass, backward, grad, queue_callback, split_backward
from .function import Function
from .hooks import RemovableHandle
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad,
                        set_grad_enabled)
from .variable import Variable

__all__ = ["backward", "grad", "queue_callback", "split_backward", "WeightPass", "RemovableHandle", "Function",
           "no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled",
           "is_inference_mode_enabled", "Variable"]
