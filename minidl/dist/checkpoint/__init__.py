"""minidl.dist.checkpoint: checkpoints of a training run on many ranks, loadable on any number of ranks
(torch.distributed.checkpoint's names).

    import minidl.dist.checkpoint as dcp
    dcp.save({"model": model.state_dict(), "optim": opt.state_dict()}, checkpoint_id="ckpt/step-100")
    dcp.load(state_dict, checkpoint_id="ckpt/step-100")     # in place, on 4 ranks, 2, or one process

A checkpoint is a folder: each rank's tensors in safetensors files of its own, written in parallel, and one
``.metadata`` (JSON) written last by the coordinator, which commits them. Every tensor is a global tensor
stored as boxes — offsets and sizes — so a checkpoint saved in one split loads in any other: a loading
rank reads only the bytes of the boxes it needs (``slices.py``, ``planner.py``). Replicas are written
once, big ones in pieces by every rank holding them. Every file's size and the CRC-32 of each of its
blocks are in the metadata, so truncated, changed or swapped files are named, never loaded
(``filesystem.py``); a save killed at any moment leaves the previous checkpoint whole (the commit).

Differences from torch 2.13: files are safetensors and ``.metadata`` is JSON (no pickles anywhere); plain
values (numbers, strings, lists of them) live in the metadata, so they must be JSON-able (torch pickles
any object); planners are minidl's own (DefaultSavePlanner/DefaultLoadPlanner take torch's arguments;
custom planner subclasses of torch's API are not supported); ``use_collectives=False`` works on one rank
only; async_save runs on a thread only.
"""
from . import format_utils, state_dict, stateful  # noqa: F401
from .coordination import CheckpointException
from .filesystem import FileSystemReader, FileSystemWriter
from .loader import load
from .metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata, MetadataIndex, StorageInfo,
                       TensorProperties, TensorStorageMetadata)
from .planner import DefaultLoadPlanner, DefaultSavePlanner
from .saver import AsyncCheckpointerType, async_save, save
from .slices import LocalSlice
from .stateful import Stateful

__all__ = ["AsyncCheckpointerType", "BytesStorageMetadata", "CheckpointException", "ChunkStorageMetadata",
           "DefaultLoadPlanner", "DefaultSavePlanner", "FileSystemReader", "FileSystemWriter", "LocalSlice",
           "Metadata", "MetadataIndex", "Stateful", "StorageInfo", "TensorProperties", "TensorStorageMetadata",
           "async_save", "format_utils", "load", "save", "state_dict", "stateful"]
