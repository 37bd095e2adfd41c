"""Fused optimizer updates, one pass over each parameter (like PyTorch's ``fused=True`` kernels),
public as ``minidl._fused_sgd_step_`` and ``minidl._fused_adam_step_`` (as torch's ``_fused_adam_``
is) for optimizers to call; and their multi-tensor forms (``_fused_*_steps_``, with Adagrad's, plus
``_foreach_norm`` and ``_foreach_mul_`` for gradient clipping), which update a whole list of tensors
of one device and dtype in one kernel launch. None of them records autograd.

The element-wise formulas live in the ``sgd_step`` / ``adam_step`` primitives (see
``minidl.kernels``); these wrappers check the tensors, hand the kernels packed 1-D buffers and
bump the version counters of everything they wrote, as any in-place op does.
"""
from __future__ import annotations

from .. import _dtype as dt
from ..autograd import grad_mode
from .core import buf, cast, contiguous_data, kernel, new_like_shape
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


# ----------------------------------------------------------------------------- multi-tensor forms
def _raw(t):
    """t's packed elements as a 1-D buffer: the storage itself when t covers all of it."""
    b = buf(t)
    layout = t._layout
    return b if layout.offset == 0 and layout.numel == b.size else b[layout.offset:layout.offset + layout.numel]


def _run_multi(name, params, lists, written, *scalars):
    """Launch ``name`` once on every param of the list (one device and dtype) and the matching entries
    of ``lists`` (a list may be None); unpacked and float16/bfloat16 tensors go through packed float32
    copies written back, as in ``_run``. ``written``: which of ``lists`` the kernel writes (param is)."""
    if not params:
        return
    first = params[0]
    dtype, device = first.dtype, first.device
    if not dtype.is_floating_point:
        raise RuntimeError(f"{name}: parameters must be floating point, got {dtype}")
    def matches(t):   # (devices compared by identity first: equality builds a device per call)
        return t.dtype is dtype and (t.device is device or t.device == device)

    for i, t in enumerate(params):
        if not matches(t):
            raise RuntimeError(f"{name}: every parameter must be {dtype} on {device} (one launch per device and "
                               f"dtype), got {t.dtype} on {t.device} at position {i}")
    for values in lists:
        if values is not None and len(values) != len(params):
            raise RuntimeError(f"{name}: {len(params)} parameters but a list of {len(values)} gradients/states")
        for p, t in zip(params, values or ()):
            if t.shape != p.shape or not matches(t):
                raise RuntimeError(f"{name}: parameter {list(p.shape)} {p.dtype} on {p.device} and its "
                                   f"gradient/state {list(t.shape)} {t.dtype} on {t.device} must match")
    compute = dt.compute_dtype(dtype)
    operands = [list(params)] + [None if v is None else list(v) for v in lists]
    copies = [None if v is None else [contiguous_data(cast(t, compute)) for t in v] for v in operands]
    kernel(name, first)(*(None if c is None else [_raw(t) for t in c] for c in copies), *scalars)
    for k in [0] + [i + 1 for i in written]:
        if operands[k] is None:
            continue
        for t, c in zip(operands[k], copies[k]):
            if c is not t:
                t.copy_(c)
            else:
                t._bump_version()


def _advance(steps) -> list:
    """Each step counter (a one-element tensor, float32 in the optimizers) plus one, in place and in
    its dtype as ``step.add_(1)`` would; returns the new counts as Python floats."""
    counts = []
    for s in steps:
        if s.numel() != 1:
            raise RuntimeError(f"fused optimizer step: step counters must be one-element tensors, got shape "
                               f"{list(s.shape)}")
        if s.device.type != "cpu":   # (a checkpoint loaded with map_location onto a GPU puts it there, as torch's)
            s.add_(1)
            counts.append(float(s.item()))
            continue
        b, i = buf(s), s._layout.offset
        b[i] += 1
        s._bump_version()
        counts.append(float(b[i]))
    return counts


@op("_fused_sgd_steps_", method=False)
def sgd_steps_(params, grads, momentum_buffers, *, lr, weight_decay, momentum, dampening, nesterov, maximize,
               firsts):
    """``_fused_sgd_step_`` on every parameter of a list (one device and dtype) in one kernel launch;
    ``momentum_buffers`` is None without momentum, ``firsts`` says per parameter whether its buffer is
    new (filled from the gradient)."""
    _run_multi("sgd_steps", params, (grads, momentum_buffers), (1,), lr, weight_decay, momentum, dampening,
               nesterov, maximize, list(firsts))


@op("_fused_adam_steps_", method=False)
def adam_steps_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, *, lr, beta1, beta2, eps,
                weight_decay, decoupled_weight_decay, amsgrad, maximize):
    """``_fused_adam_step_`` on every parameter of a list (one device and dtype) in one kernel launch.
    Advances each parameter's step counter by one and takes its bias corrections from it, with the
    per-parameter path's formulas (so both round alike)."""
    counts = _advance(steps)
    decay = 1 - lr * weight_decay if decoupled_weight_decay else 1
    _run_multi("adam_steps", params, (grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs), (1, 2, 3), beta1, beta2, eps,
               0 if decoupled_weight_decay else weight_decay, decay, amsgrad, maximize,
               [lr / (1 - beta1 ** s) for s in counts], [(1 - beta2 ** s) ** 0.5 for s in counts])


@op("_fused_adagrad_steps_", method=False)
def adagrad_steps_(params, grads, state_sums, steps, *, lr, lr_decay, weight_decay, eps, maximize):
    """torch.optim.Adagrad's update of every parameter of a list (one device and dtype) and its squared
    gradient sum, in one kernel launch (the ``adagrad_steps`` primitive); advances the step counters."""
    counts = _advance(steps)
    _run_multi("adagrad_steps", params, (grads, state_sums), (1,), weight_decay, eps, maximize,
               [lr / (1 + (s - 1) * lr_decay) for s in counts])


@op("_foreach_norm", method=False)
def foreach_norm(tensors, ord=2.0):
    """The ``ord``-norm of each tensor of a list (one device and dtype; ord > 0 or inf), computed in one
    kernel launch: a 1-D tensor of the tensors' dtype (float64 sums, rounded once)."""
    ord = float(ord)
    if not tensors:
        raise ValueError("_foreach_norm: expects at least one tensor")
    if not (ord > 0):
        raise ValueError(f"_foreach_norm: ord must be positive or inf, got {ord}")
    first = tensors[0]
    if grad_mode.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise RuntimeError("_foreach_norm: has no gradient; call it under minidl.no_grad() or on detached tensors")
    for t in tensors:
        if t.dtype is not first.dtype or t.device != first.device or not t.dtype.is_floating_point:
            raise RuntimeError(f"_foreach_norm: every tensor must be floating point, of one dtype and device: "
                               f"{first.dtype} on {first.device} and {t.dtype} on {t.device}")
    compute = dt.compute_dtype(first.dtype)
    out = new_like_shape((len(tensors),), dt.float64, first)
    kernel("norms", first)([_raw(contiguous_data(cast(t, compute))) for t in tensors], ord, buf(out))
    return cast(out, first.dtype)


@op("_foreach_mul_", method=False)
def foreach_mul_(tensors, factor):
    """Every tensor of a list (one device and dtype) times the number ``factor``, in place, in one launch."""
    _run_multi("scale", tensors, (), (), float(factor))
