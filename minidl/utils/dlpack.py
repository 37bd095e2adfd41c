"""``torch.utils.dlpack``'s functions: tensors to and from DLPack capsules.

``to_dlpack(tensor)`` is the older, capsule-first spelling of ``tensor.__dlpack__()`` (a DLPack 0.x
capsule, as torch's); ``from_dlpack`` is ``minidl.from_dlpack``, which takes a capsule or any object
with ``__dlpack__``. The exchange itself is ``minidl/_dlpack.py``.
"""
import minidl
from minidl import from_dlpack

__all__ = ["from_dlpack", "to_dlpack"]


def to_dlpack(tensor: minidl.Tensor):
    """A capsule sharing ``tensor``'s memory, for one ``from_dlpack`` (of minidl, torch, numpy, ...)."""
    return tensor.__dlpack__()
