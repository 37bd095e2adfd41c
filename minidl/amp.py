"""Automatic mixed precision, as ``torch.amp`` 2.13: ``autocast`` regions run the matmul-class ops
in a lower-precision dtype and losses and the like in float32 (the policies and their op lists are
in :mod:`minidl.ops.autocast_mode`); ``GradScaler`` is still inert (it never scales).

The error and warning texts are PyTorch's (naming minidl's API where they name torch's), so
scripts and tests that look for them still work.
"""
from __future__ import annotations

import functools
import warnings

from . import _dtype as dt
from .ops import autocast_mode as mode

__all__ = ["autocast", "custom_bwd", "custom_fwd", "GradScaler", "is_autocast_available"]


def is_autocast_available(device_type: str) -> bool:
    try:
        mode.device_type(device_type)
    except RuntimeError:
        return False
    return True


def _cuda_available() -> bool:
    from . import cuda   # (minidl.cuda imports this module for its ``amp``)
    return cuda.is_available()


def _supported_dtypes():
    """What CPU autocast takes: PyTorch's bfloat16 and float16 (bfloat16 once minidl has it)."""
    return tuple(d for d in (getattr(dt, "bfloat16", None), dt.float16) if d is not None)


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
        elif enabled and self.device == "cpu" and self.fast_dtype not in _supported_dtypes():
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
                          "CPU Autocast only supports dtypes of " + ", ".join(map(str, _supported_dtypes()))
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


class GradScaler:
    """Loss scaling that never scales: ``scale`` returns its argument, ``step`` calls
    ``optimizer.step()``, ``update`` does nothing and ``is_enabled()`` is False."""

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        """PyTorch's arguments, accepted: none of them matters without scaling."""

    def scale(self, outputs):
        return outputs

    def unscale_(self, optimizer):
        pass

    def step(self, optimizer, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        pass

    def get_scale(self) -> float:
        return 1.0

    def is_enabled(self) -> bool:
        return False

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        """Accepts (and, being disabled, ignores) any GradScaler state, PyTorch's included."""
