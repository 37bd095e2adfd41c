"""Utilities that mirror ``torch.utils``: ``minidl.utils.data`` (datasets, samplers, DataLoader),
``minidl.utils.dlpack`` (``to_dlpack``/``from_dlpack``) and, imported on use because it needs the
optional ``tensorboard`` package, ``minidl.utils.tensorboard`` (``SummaryWriter``)."""
from . import data, dlpack

__all__ = ["data", "dlpack"]
