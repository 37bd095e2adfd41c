"""Automatic mixed precision, as ``torch.amp`` 2.13: ``autocast`` regions run the matmul-class ops
in a lower-precision dtype and losses and the like in float32 (the policies and their op lists are
in :mod:`minidl.ops.autocast_mode`); ``GradScaler`` scales the loss so that float16 gradients do
not underflow, and skips the optimizer steps whose gradients overflowed. Functions composed of ops
(``minidl.nn.functional``'s, or your own) take a policy with ``autocast_op(name)`` (the policy
PyTorch gives its op ``name``) or ``computed_in_float32`` (half inputs widened, the result
rounded once).

The error and warning texts are PyTorch's (naming minidl's API where they name torch's), so
scripts and tests that look for them still work.
"""
from __future__ import annotations

import functools
import math
import warnings
from collections import abc
from enum import Enum

import numpy as np

import minidl

from . import _dtype as dt
from . import _tracing
from ._tensor_base import TensorBase
from .autograd import no_grad
from .ops import autocast_mode as mode
from .ops.autocast_mode import autocast_op
from .ops.core import computed_in_float32
from .ops import full, stack

__all__ = ["autocast", "autocast_op", "computed_in_float32", "custom_bwd", "custom_fwd", "GradScaler",
           "is_autocast_available"]


def is_autocast_available(device_type: str) -> bool:
    try:
        mode.device_type(device_type)
    except RuntimeError:
        return False
    return True


def _cuda_available() -> bool:
    return minidl.cuda.is_available()  # (looked up when called: minidl.cuda imports this module)


SUPPORTED_DTYPES = (dt.bfloat16, dt.float16)  # what CPU autocast takes, as PyTorch's


class autocast:
    """``with autocast(device_type, dtype=None, enabled=True, cache_enabled=None):`` or as a
    decorator: ops in the region follow autocast's policies for ``device_type`` ('cpu' or
    'cuda'). ``dtype`` defaults to the device's autocast dtype (bfloat16 on the CPU, float16 on
    CUDA); regions nest, ``enabled=False`` turning autocast off inside one. As in PyTorch, CUDA
    autocast without a CUDA device warns and stays off, and on the CPU a dtype other than
    bfloat16 and float16 warns and turns autocast off."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.fast_dtype = mode.get_autocast_dtype(device_type) if dtype is None else dtype
        self.device = mode.device_type(device_type)
        self._cache_enabled = mode.is_autocast_cache_enabled() if cache_enabled is None else cache_enabled
        if enabled and self.device == "cuda" and not _cuda_available():
            warnings.warn("CUDA is not available. Disabling autocast.", stacklevel=2)
            enabled = False
        elif enabled and self.device == "cpu" and self.fast_dtype not in SUPPORTED_DTYPES:
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
                          "CPU Autocast only supports dtypes of " + ", ".join(map(str, SUPPORTED_DTYPES))
                          + " currently.", stacklevel=2)
            enabled = False
        self._enabled = bool(enabled)

    def __enter__(self):
        self.prev_cache_enabled = mode.is_autocast_cache_enabled()
        self.prev = mode.is_autocast_enabled(self.device)
        self.prev_fastdtype = mode.get_autocast_dtype(self.device)
        mode.set_autocast_enabled(self.device, self._enabled)
        mode.set_autocast_dtype(self.device, self.fast_dtype)
        mode.increment_nesting()
        mode.set_autocast_cache_enabled(self._cache_enabled)
        return self

    def __exit__(self, *exc_info):
        if mode.decrement_nesting() == 0:   # the weights' casts live as long as the outermost region
            mode.clear_autocast_cache()
        mode.set_autocast_enabled(self.device, self.prev)
        mode.set_autocast_dtype(self.device, self.prev_fastdtype)
        mode.set_autocast_cache_enabled(self.prev_cache_enabled)
        return False

    def __call__(self, func):
        if not callable(func):
            raise TypeError(f"autocast()(func) requires a callable, but got {type(func).__name__}. Did you mean to "
                            f"use autocast as a context manager? For example:\n"
                            f"    with minidl.autocast(device_type=...):\n"
                            f"        output = model(input)")

        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return decorate_autocast


def custom_fwd(fwd=None, *, device_type: str, cast_inputs=None):
    """Decorates the ``forward`` of a custom ``autograd.Function``: with ``cast_inputs``, inside an
    autocast region its floating tensors (float64 excepted) are cast to that dtype and it runs with
    autocast off; without, it runs under the current state, which ``custom_bwd`` gives backward."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(ctx, *args, **kwargs):
        ctx._dtype = mode.get_autocast_dtype(device_type)
        enabled = mode.is_autocast_enabled(device_type)
        ctx._fwd_used_autocast = enabled and cast_inputs is None
        if cast_inputs is None or not enabled:
            return fwd(ctx, *args, **kwargs)
        kind = mode.device_type(device_type)
        with autocast(device_type, enabled=False):
            return fwd(ctx, *mode.cast(args, kind, cast_inputs), **mode.cast(kwargs, kind, cast_inputs))
    return decorate_fwd


def custom_bwd(bwd=None, *, device_type: str):
    """Decorates the ``backward`` of a custom ``autograd.Function``: it runs under the autocast
    state its ``custom_fwd``-decorated forward ran under."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(ctx, *args, **kwargs):
        with autocast(device_type, enabled=ctx._fwd_used_autocast, dtype=ctx._dtype):
            return bwd(ctx, *args, **kwargs)
    return decorate_bwd


# ----------------------------------------------------------------------------- gradient scaling
class OptState(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


class GradScaler:
    """Loss scaling for float16 training, as ``torch.amp.GradScaler``: ``scale(loss)`` multiplies
    by the scale, ``unscale_(optimizer)`` divides the gradients by it and notes whether any is
    inf/NaN, ``step(optimizer)`` skips ``optimizer.step()`` when one was, and ``update()`` backs
    the scale off after such a step or grows it after ``growth_interval`` good ones in a row.

    The scale is a 0-d float32 tensor on the device of the first output scaled. ``GradScaler()``
    (device 'cuda') without a CUDA device warns and disables itself; a disabled scaler passes
    everything through (``scale`` returns its argument, ``step`` calls ``optimizer.step()``).
    minidl's optimizers all take unscaled gradients (no ``_step_supports_amp_scaling``)."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        self._device = device
        self._enabled = enabled
        if device == "cuda" and enabled and not _cuda_available():
            warnings.warn("minidl.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                          stacklevel=2)
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
        self._init_scale = init_scale
        self._scale = None                  # made by the first scale()
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._growth_tracker = 0            # unskipped steps in a row since the last change of scale
        self._per_optimizer_states = {}

    def _check_scale(self, funcname: str):
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  This may indicate your script did "
                                 f"not use scaler.scale(loss or outputs) earlier in the iteration.")
        return self._scale

    def _optimizer_state(self, optimizer) -> dict:
        return self._per_optimizer_states.setdefault(id(optimizer), {"stage": OptState.READY, "found_inf": None})

    def scale(self, outputs):
        """``outputs`` (a tensor, or nested lists and tuples of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, TensorBase):
            if self._scale is None:
                self._scale = _tracing.made_once(   # (in a compiled call: made at the capture only)
                    lambda: full((), self._init_scale, dtype=dt.float32, device=outputs.device))
            return outputs * self._scale.to(outputs.device)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(v) for v in outputs)
        if isinstance(outputs, abc.Iterable):
            return map(self.scale, outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale (once per step), noting infs and NaNs. Under
        minidl.compile it is a host step: a replay notes the stage and the infs again, so that a
        ``scaler.step()`` outside the compiled call does not unscale a second time."""
        if not self._enabled:
            return
        _tracing.host_step(lambda: self._unscale(optimizer))

    def _unscale(self, optimizer) -> None:
        scale = self._check_scale("unscale_")
        state = self._optimizer_state(optimizer)
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = scale.double().reciprocal().float()   # (the reciprocal in float64, as PyTorch)
        finite = []
        with no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    grad = param.grad
                    if grad is None:
                        continue
                    if grad.dtype is dt.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    finite.append(grad.isfinite().all().to(scale.device))
                    grad.mul_(inv_scale.to(grad.device))
        state["found_inf"] = stack(finite).all().logical_not() if finite else None
        state["stage"] = OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step(*args, **kwargs)`` on unscaled gradients, skipped when one was inf/NaN."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale("step")
        state = self._optimizer_state(optimizer)
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if state["found_inf"] is None:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        result = None if bool(state["found_inf"]) else optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return result

    def update(self, new_scale=None) -> None:
        """Set the scale to ``new_scale`` (a float or a 1-element tensor), or back it off if any
        step since the last update found infs, or grow it after ``growth_interval`` good steps."""
        if not self._enabled:
            return
        scale = self._check_scale("update")
        if new_scale is not None:
            if not isinstance(new_scale, float) and (new_scale.device.type != self._device or new_scale.numel() != 1
                                                     or new_scale.requires_grad):
                raise AssertionError("new_scale should be a float or a 1-element minidl.cuda.FloatTensor or "
                                     "minidl.FloatTensor with requires_grad=False.")
            scale.fill_(new_scale)
        else:
            found = [state["found_inf"] for state in self._per_optimizer_states.values()
                     if state["found_inf"] is not None]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            scale.fill_(self._updated_scale(float(scale.item()), any(bool(f) for f in found)))
        self._per_optimizer_states = {}

    def _updated_scale(self, scale: float, found_inf: bool) -> float:
        """PyTorch's ``_amp_update_scale_``: the next scale, counting good steps in _growth_tracker."""
        if found_inf:
            self._growth_tracker = 0
            return scale * self._backoff_factor
        self._growth_tracker += 1
        if self._growth_tracker == self._growth_interval:
            self._growth_tracker = 0
            grown = float(np.float32(scale * self._growth_factor))
            return grown if math.isfinite(grown) else scale
        return scale

    def get_scale(self) -> float:
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale.item())

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def _get_growth_tracker(self) -> int:
        return self._growth_tracker if self._enabled else 0

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        """PyTorch's five entries (so either framework loads the other's), or {} when disabled."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        if self._scale is not None:
            self._scale.fill_(self._init_scale)
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
