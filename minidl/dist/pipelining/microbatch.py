"""Splitting a batch into micro-batches and merging the last stage's outputs, as
``torch.distributed.pipelining.microbatch`` does.

A tensor is split along its ``TensorChunkSpec`` dimension (0 by default) the way
``torch.tensor_split`` does: with ``n`` rows and ``m`` chunks the first ``n % m`` chunks get one row
more. Anything that is not a tensor goes to every micro-batch unchanged.
"""
from __future__ import annotations

import minidl


class TensorChunkSpec:
    """Split (and merge) a tensor argument along ``split_dim``."""

    def __init__(self, split_dim: int):
        self.split_dim = split_dim

    def __repr__(self):
        return f"TensorChunkSpec({self.split_dim})"


DEFAULT_SPEC = TensorChunkSpec(0)


def chunk_sizes(n: int, chunks: int) -> list:
    """tensor_split's sizes: ``chunks`` parts of ``n``, the first ``n % chunks`` one larger."""
    q, r = divmod(n, chunks)
    return [q + 1 if i < r else q for i in range(chunks)]


def _split(value, spec, chunks, what):
    if not isinstance(value, minidl.Tensor):
        return [value] * chunks
    spec = spec or DEFAULT_SPEC
    dim = spec.split_dim % value.ndim if value.ndim else 0
    n = value.shape[dim] if value.ndim else 0
    if n < chunks:
        raise ValueError(f"pipelining: {what} has size {n} along dim {spec.split_dim} (shape "
                         f"{list(value.shape)}), fewer than the {chunks} micro-batches")
    parts, start = [], 0
    for size in chunk_sizes(n, chunks):
        parts.append(value.narrow(dim, start, size))
        start += size
    return parts


def split_args_kwargs_into_chunks(args, kwargs, chunks, args_chunk_spec=None, kwargs_chunk_spec=None, where=None,
                                  names=None):
    """(list of args tuples, list of kwargs dicts), one per micro-batch. ``where`` (a stage) and
    ``names`` (of the arguments) only make the errors say more."""
    kwargs, at = kwargs or {}, f" on {where}" if where else ""
    if args_chunk_spec is not None and len(args_chunk_spec) != len(args):
        raise ValueError(f"pipelining: args_chunk_spec has {len(args_chunk_spec)} entries for {len(args)} "
                         f"arguments{at}")
    split_args = [_split(a, args_chunk_spec[i] if args_chunk_spec else None, chunks,
                         (names[i] if names else f"argument {i}") + at) for i, a in enumerate(args)]
    split_kwargs = {k: _split(v, (kwargs_chunk_spec or {}).get(k), chunks, f"keyword argument {k!r}{at}")
                    for k, v in kwargs.items()}
    return ([tuple(parts[i] for parts in split_args) for i in range(chunks)],
            [{k: parts[i] for k, parts in split_kwargs.items()} for i in range(chunks)])


def merge_chunks(chunks, spec=None):
    """The micro-batches' outputs joined back into one batch (tensors concatenated along the spec's
    dim, tuples element by element)."""
    first = chunks[0]
    if isinstance(first, minidl.Tensor):
        dim = (spec or DEFAULT_SPEC).split_dim
        return minidl.cat(list(chunks), dim) if first.ndim else minidl.stack(list(chunks))
    if isinstance(first, (tuple, list)):
        specs = spec if isinstance(spec, (tuple, list)) else [spec] * len(first)
        return type(first)(merge_chunks([c[i] for c in chunks], specs[i]) for i in range(len(first)))
    return list(chunks)
