"""Memory layouts of a tensor (``torch.layout``): ``strided`` (every dense tensor) and
``sparse_coo`` (``minidl.sparse``). Only their names matter: ``t.layout == minidl.sparse_coo``."""
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
