"""minidl.dist.fsdp: fully sharded data parallelism (torch.distributed.fsdp's FSDP2 API).

    for block in model.blocks:
        fully_shard(block)                 # each block: one all-gather before its forward, one reduce-scatter
    fully_shard(model)                     # the rest (embeddings, head) with the root
    opt = minidl.optim.AdamW(model.parameters())   # steps the shards: state 1/n per rank

Each rank holds 1/n of every parameter, its gradient and its optimizer state; a block's parameters are whole
only while its forward or backward runs. Training equals single-process training on the global batch.
"""
from ._fully_shard import FSDPModule, UnshardHandle, fully_shard, register_fsdp_forward_method
from ._policy import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

__all__ = ["CPUOffloadPolicy", "FSDPModule", "MixedPrecisionPolicy", "OffloadPolicy", "UnshardHandle",
           "fully_shard", "register_fsdp_forward_method"]
