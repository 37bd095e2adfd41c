"""minidl.nn.parallel: DistributedDataParallel, imported from minidl.dist on first use (nn stays
below dist, and ``import minidl`` does not load the distributed layer)."""


def __getattr__(name):
    if name == "DistributedDataParallel":
        from ...dist.ddp import DistributedDataParallel
        return DistributedDataParallel
    raise AttributeError(f"module 'minidl.nn.parallel' has no attribute {name!r}")


__all__ = ["DistributedDataParallel"]
