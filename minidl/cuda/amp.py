"""``torch.cuda.amp``'s older spelling of :mod:`minidl.amp` for device 'cuda', deprecated as in
PyTorch (a FutureWarning names the spelling to use)."""
import warnings

from .. import _dtype as dt
from .. import amp


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"`minidl.cuda.amp.{old}(args...)` is deprecated. Please use `minidl.amp.{new}` instead.",
                  FutureWarning, stacklevel=3)


class autocast(amp.autocast):
    def __init__(self, enabled: bool = True, dtype=dt.float16, cache_enabled: bool = True):
        _deprecated("autocast", "autocast('cuda', args...)")
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(amp.GradScaler):
    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        _deprecated("GradScaler", "GradScaler('cuda', args...)")
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)


__all__ = ["GradScaler", "autocast"]
