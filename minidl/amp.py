"""Automatic mixed precision, inert: minidl computes every op in its operands' own dtype, so
``autocast`` regions change nothing and ``GradScaler`` never scales the loss. Both behave as
PyTorch's do with ``enabled=False``, so scripts written for AMP run unchanged."""
from __future__ import annotations

import functools


class autocast:
    """``with autocast(device_type, dtype=None, enabled=True):`` (or as a decorator): no effect."""

    def __init__(self, device_type="cuda", dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"autocast: expected a device type string such as 'cuda' or 'cpu', got "
                             f"{device_type!r}")
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = bool(enabled)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapped


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
