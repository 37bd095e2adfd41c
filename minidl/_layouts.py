"""Memory layouts of a tensor (``torch.layout``): ``strided`` (every dense tensor) and
``sparse_coo`` (``minidl.sparse``). Only their names matter: ``t.layout == minidl.sparse_coo``.
And ``torch.memory_format``s: the dim orders a strided tensor can be laid out in (``Tensor.to``,
``contiguous``, ``clone``, ``is_contiguous`` take them; other ops return the default order)."""
from __future__ import annotations


class TensorLayout:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"minidl.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


strided = TensorLayout("strided")
sparse_coo = TensorLayout("sparse_coo")


def _by_name(name: str) -> TensorLayout:
    return {"strided": strided, "sparse_coo": sparse_coo}[name]


class MemoryFormat:
    """``torch.memory_format``: the order of a dense tensor's dims in memory. ``order`` lists a format's
    dims from the fastest-varying (stride 1) outward; None for the formats that name no order."""
    __slots__ = ("name", "order")

    def __init__(self, name: str, order=None):
        self.name, self.order = name, order

    def __repr__(self):
        return f"minidl.{self.name}"

    def __reduce__(self):
        return (_format_by_name, (self.name,))

    def strides(self, shape):
        """The strides of a new dense tensor of ``shape`` in this format (row-major for contiguous_format);
        None when the format does not fit that many dims."""
        order = self.order if self.order is not None else tuple(range(len(shape) - 1, -1, -1))
        if len(order) != len(shape):
            return None
        strides, step = [0] * len(shape), 1
        for d in order:
            strides[d], step = step, step * max(shape[d], 1)
        return tuple(strides)


contiguous_format = MemoryFormat("contiguous_format")
preserve_format = MemoryFormat("preserve_format")
channels_last = MemoryFormat("channels_last", (1, 3, 2, 0))         # N, H, W, C in memory
channels_last_3d = MemoryFormat("channels_last_3d", (1, 4, 3, 2, 0))  # N, D, H, W, C in memory


def _format_by_name(name: str) -> MemoryFormat:
    return {f.name: f for f in (contiguous_format, preserve_format, channels_last, channels_last_3d)}[name]
