"""``torch.cuda.amp``'s older spelling of :mod:`minidl.amp` (inert, like it)."""
from ..amp import GradScaler, autocast as _autocast


def autocast(enabled=True, dtype=None, cache_enabled=True):
    return _autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


__all__ = ["GradScaler", "autocast"]
