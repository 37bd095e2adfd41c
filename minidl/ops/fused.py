"""Fused optimizer updates, one pass over each parameter (like PyTorch's ``fused=True`` kernels),
public as ``minidl._fused_sgd_step_`` and ``minidl._fused_adam_step_`` (as torch's ``_fused_adam_``
is) for optimizers to call.

The element-wise formulas live in the ``sgd_step`` / ``adam_step`` primitives (see
``minidl.kernels``); these wrappers check the tensors, hand the kernels packed 1-D buffers and
bump the version counters of everything they wrote, as any in-place op does.
"""
from __future__ import annotations

from .. import _dtype as dt
from .core import buf, cast, contiguous_data, kernel
from .registry import op


def _packed(t):
    """t's elements as a 1-D slice of its buffer, or None when t is not packed."""
    layout = t._layout
    if not layout.is_contiguous:
        return None
    return buf(t)[layout.offset:layout.offset + layout.numel]


def _run(name, param, tensors, *scalars):
    """Launch ``name`` on (param, *tensors); unpacked ones go through packed copies written back, and
    so do float16 and bfloat16 ones, updated in float32 and rounded once on the way back."""
    for t in tensors:
        if t is not None and (t.shape != param.shape or t.dtype is not param.dtype or t.device != param.device):
            raise RuntimeError(f"{name}: parameter {list(param.shape)} {param.dtype} on {param.device} and its "
                               f"gradient/state {list(t.shape)} {t.dtype} on {t.device} must match")
    if not param.dtype.is_floating_point:
        raise RuntimeError(f"{name}: parameters must be floating point, got {param.dtype}")
    operands = [param] + [t if t is not None else param for t in tensors]  # (param stands in for a None)
    compute = dt.compute_dtype(param.dtype)
    packed = []
    for t in operands:
        packed.append(packed[0] if packed and t is param else contiguous_data(cast(t, compute)))
    kernel(name, param)(*(_packed(t) for t in packed), *scalars)
    written = [0] + [i + 1 for i, t in enumerate(tensors) if t is not None and i > 0]  # grad is read only
    for i in written:
        if packed[i] is not operands[i]:
            operands[i].copy_(packed[i])
        else:
            operands[i]._bump_version()


@op("_fused_sgd_step_", method=False)
def sgd_step_(param, grad, momentum_buffer, *, lr, weight_decay, momentum, dampening, nesterov, maximize,
              first):
    """One step of ``torch.optim.SGD``'s update on ``param`` in place, in one pass: ``momentum_buffer``
    (``param``'s shape, or None without momentum) is filled from the gradient when ``first``, else
    updated. The formulas: the ``sgd_step`` primitive in ``minidl.kernels``."""
    _run("sgd_step", param, (grad, momentum_buffer), lr, weight_decay, momentum, dampening, nesterov,
         maximize, first)


@op("_fused_adam_step_", method=False)
def adam_step_(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, *, beta1, beta2, eps, weight_decay, decay,
               amsgrad, maximize, step_size, bias_correction2_sqrt):
    """One step of ``torch.optim.Adam``'s (or AdamW's) update on ``param`` and its moment estimates
    in place, in one pass. The caller folds the step count in: ``step_size = lr / (1 - beta1**step)``,
    ``bias_correction2_sqrt = sqrt(1 - beta2**step)``; ``decay`` is AdamW's factor ``1 - lr*wd``
    (1 for Adam); ``max_exp_avg_sq`` is None without amsgrad. The formulas: the ``adam_step``
    primitive in ``minidl.kernels``."""
    _run("adam_step", param, (grad, exp_avg, exp_avg_sq, max_exp_avg_sq), beta1, beta2, eps, weight_decay,
         decay, amsgrad, maximize, step_size, bias_correction2_sqrt)
