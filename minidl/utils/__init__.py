"""Utilities that mirror ``torch.utils``: ``minidl.utils.data`` (datasets, samplers, DataLoader)."""
from . import data  # noqa: F401
