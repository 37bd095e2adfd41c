"""``torch.utils.dlpack``'s names: tensors to and from DLPack capsules, and the device codes.

``to_dlpack(tensor)`` is the older, capsule-first spelling of ``tensor.__dlpack__()`` (a DLPack 0.x
capsule, as torch's); ``from_dlpack`` is ``minidl.from_dlpack``, which takes a capsule or any object
with ``__dlpack__``. The exchange itself is ``minidl/_dlpack.py``.
"""
import minidl
from minidl import DLDeviceType, from_dlpack

__all__ = ["DLDeviceType", "from_dlpack", "to_dlpack"]


def to_dlpack(tensor: minidl.Tensor):
    """A capsule sharing ``tensor``'s memory, for one ``from_dlpack`` (of minidl, torch, numpy, ...).
    A tensor that requires grad goes out too (as its data): torch's ``to_dlpack`` allows it, unlike
    ``__dlpack__``."""
    return tensor.detach().__dlpack__()
