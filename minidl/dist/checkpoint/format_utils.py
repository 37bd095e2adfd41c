"""A distributed checkpoint as one ``minidl.save`` file, and back (torch's names: "torch save" is
``minidl.save`` here). Both run in this process alone, with no process group."""
from __future__ import annotations

import os

from ... import empty, serialization
from .filesystem import FileSystemReader
from .flatten import set_leaf
from .loader import load
from .metadata import TensorStorageMetadata
from .planner import decode_value
from .saver import save


def dcp_to_torch_save(dcp_checkpoint_dir, torch_save_path) -> None:
    """The whole checkpoint at ``dcp_checkpoint_dir``, rebuilt as the nested dict it was saved from (lists
    where it had lists or tuples of tensors), written by ``minidl.save`` to ``torch_save_path``."""
    serialization.save(whole_state_dict(dcp_checkpoint_dir), torch_save_path)


def torch_save_to_dcp(torch_save_path, dcp_checkpoint_dir) -> None:
    """A ``minidl.save`` file (a dict) written as a distributed checkpoint (loaded with weights_only=True:
    it unpickles nothing unsafe)."""
    state_dict = serialization.load(torch_save_path)
    if not isinstance(state_dict, dict):
        raise TypeError(f"torch_save_to_dcp: {os.fspath(torch_save_path)} holds a {type(state_dict).__name__}, "
                        f"not a dict")
    save(state_dict, checkpoint_id=dcp_checkpoint_dir, no_dist=True)


def whole_state_dict(dcp_checkpoint_dir) -> dict:
    """Every key of a checkpoint, each tensor whole, in the nesting it was saved in."""
    meta = FileSystemReader(dcp_checkpoint_dir).read_metadata()
    out = {}
    for fqn, entry in meta.state_dict_metadata.items():
        if isinstance(entry, TensorStorageMetadata):
            value = empty(entry.size, dtype=entry.properties.dtype)
        else:
            value = decode_value(meta.values[fqn])
        set_leaf(out, meta.planner_data[fqn], value)
    load(out, checkpoint_id=dcp_checkpoint_dir, no_dist=True)
    return out
