"""How ``fully_shard`` casts and where it keeps the shards (torch.distributed.fsdp's policies)."""
from __future__ import annotations

import dataclasses

from ..._dtype import dtype as DType


@dataclasses.dataclass(frozen=True)
class MixedPrecisionPolicy:
    """``param_dtype``: the dtype parameters are all-gathered and computed in (bfloat16, say); the shards, the
    optimizer and its state stay in the parameters' own dtype. ``reduce_dtype``: the dtype gradients are
    reduce-scattered in (float32 keeps a sum of many bfloat16 gradients exact enough; default: param_dtype).
    ``output_dtype``: floating outputs of the module's forward are cast to it. ``cast_forward_inputs``: floating
    inputs of the forward are cast to param_dtype."""
    param_dtype: DType | None = None
    reduce_dtype: DType | None = None
    output_dtype: DType | None = None
    cast_forward_inputs: bool = True

    def __post_init__(self):
        for name in ("param_dtype", "reduce_dtype", "output_dtype"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, DType) and value.is_floating_point):
                raise ValueError(f"MixedPrecisionPolicy: {name} must be a floating dtype (float32, float64, "
                                 f"bfloat16, float16) or None, got {value!r}")


@dataclasses.dataclass(frozen=True)
class OffloadPolicy:
    """No offloading: the shards live on the mesh's device."""


@dataclasses.dataclass(frozen=True)
class CPUOffloadPolicy(OffloadPolicy):
    """The shards, their gradients and the optimizer's step stay in host memory; a group's parameters are copied
    to the mesh's device when all-gathered and their gradients back when reduce-scattered. ``pin_memory`` is
    accepted for torch's signature (minidl's host memory is what its device copies read)."""
    pin_memory: bool = True
