"""Who writes what, and who reads what.

Saving. Each rank lists the boxes it holds (``local_plan``): a plain tensor is the one box covering it, a
``LocalSlice`` (or any ``__dcp_slices__``) the boxes it says. The same box on several ranks is a replica:
DDP's parameters are on every rank. With every rank's list, each rank computes the same ``global_plan``
(no second message): every box is written once, by one of the ranks holding it, the heaviest first and
each to the lightest-loaded holder; a replicated box of at least ``SPLIT_BYTES`` is cut along dimension 0
into one piece per holder, so that N data-parallel ranks each write 1/N of the model, in parallel
(replicas are taken to be equal, as torch takes them: unequal ones would be saved as a patchwork). The
plan also checks what only all the lists together show: a key that is a tensor on one rank and a value on
another, or of other sizes or dtypes, or boxes that overlap or leave part of a tensor out.

Loading. Each rank asks, for every box it holds, which stored boxes overlap it (``read_plan``) and reads
the bytes of those overlaps only: a rank of a 2-way split reads half of each tensor, whatever split the
checkpoint was saved in.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ... import _dtype as dt
from ... import serialization
from ..._tensor import Tensor
from .filesystem import box_name
from .metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata, MetadataIndex, TensorProperties,
                       TensorStorageMetadata)
from .slices import box_index, overlap, row_major_strides, run_count, runs, slices_of, span, split_rows, volume

SPLIT_BYTES = 1 << 20   # a replicated box this big is written in pieces, one by each rank holding it
MAX_RUNS = 64           # an overlap of more runs than this is read as one span


@dataclasses.dataclass
class Piece:
    """A box a rank writes: ``array`` holds its raw bytes as a row-major host array of ``sizes``."""
    fqn: str
    offsets: tuple
    sizes: tuple
    dtype: object
    array: np.ndarray

    @property
    def key(self) -> str:
        return box_name(self.fqn, self.offsets, self.sizes)


def host_array(t: Tensor, copy: bool) -> np.ndarray:
    """A tensor's elements as a row-major host array of its raw storage type (bfloat16 as its 16 bits)."""
    t = t.detach().cpu().contiguous()
    flat = t._storage.buf[t._layout.offset:t._layout.offset + t.numel()]
    return (flat.copy() if copy else flat).reshape(tuple(t.shape))


class DefaultSavePlanner:
    """torch's DefaultSavePlanner arguments: ``dedup_save_to_lowest_rank=True`` writes every replica from the
    lowest rank holding it (no balancing, no pieces); ``dedup_replicated_tensors=False`` has every holder write
    its own copy (the metadata names the lowest's). minidl always flattens (``flatten_state_dict``,
    ``flatten_sharded_tensors`` must stay True); ``enable_plan_caching`` changes nothing."""

    def __init__(self, flatten_state_dict: bool = True, flatten_sharded_tensors: bool = True,
                 dedup_replicated_tensors: bool | None = None, dedup_save_to_lowest_rank: bool = False,
                 enable_plan_caching: bool = False):
        if not (flatten_state_dict and flatten_sharded_tensors):
            raise ValueError("DefaultSavePlanner: minidl always flattens the state dict (flatten_state_dict and "
                             "flatten_sharded_tensors must be True)")
        self.dedup = dedup_replicated_tensors is not False
        self.to_lowest = dedup_save_to_lowest_rank

    def local_plan(self, leaves: dict, paths: dict, what: str):
        """(what this rank holds, as a picklable list of (key, value or (dtype, size, offsets, sizes), path) in
        the state dict's order; its tensors, key -> [(offsets, tensor)], which stay here)."""
        boxes_of, entries = {}, []
        for fqn, leaf in leaves.items():
            found = slices_of(leaf)
            if found is None:
                entries.append((fqn, _encode_value(leaf, fqn, what), paths[fqn]))
                continue
            size, boxes = found
            for offsets, t in boxes:
                boxes_of.setdefault(fqn, []).append((tuple(offsets), t))
                entries.append((fqn, (t.dtype.name, tuple(size), tuple(offsets), tuple(t.shape)), paths[fqn]))
        return entries, boxes_of

    def global_plan(self, plans: list, what: str):
        """(each rank's list of (fqn, offsets, sizes) to write, the Metadata without its storage) — the same
        on every rank, computed from every rank's local plan."""
        meta = Metadata({}, world_size=len(plans))
        holders, first, problems = {}, {}, []
        for r, plan in enumerate(plans):
            for fqn, item, path in plan:
                entry = meta.state_dict_metadata.get(fqn)
                if entry is None:
                    meta.planner_data[fqn], first[fqn] = path, r
                    if isinstance(item, tuple):
                        entry = TensorStorageMetadata(TensorProperties(dt.from_name(item[0])), item[1], [])
                    else:
                        entry, meta.values[fqn] = BytesStorageMetadata(), item
                    meta.state_dict_metadata[fqn] = entry
                if not isinstance(item, tuple):
                    if isinstance(entry, TensorStorageMetadata):
                        problems.append(f"{fqn!r} is a plain value on rank {r} but a tensor on rank {first[fqn]}")
                    continue
                dtype, size, offsets, sizes = item
                if isinstance(entry, BytesStorageMetadata):
                    problems.append(f"{fqn!r} is a tensor on rank {r} but a plain value on rank {first[fqn]}")
                elif (entry.properties.dtype.name, entry.size) != (dtype, size):
                    problems.append(f"{fqn!r} is a {dtype} tensor of size {list(size)} on rank {r} but a "
                                    f"{entry.properties.dtype.name} tensor of size {list(entry.size)} on rank "
                                    f"{first[fqn]}")
                elif volume(sizes):   # (an empty box holds no bytes: nothing to write or read)
                    holders.setdefault((fqn, offsets, sizes), []).append(r)
        problems += _coverage(meta, holders)
        if problems:
            raise ValueError(f"{what}: the ranks' state dicts do not fit together: " + "; ".join(problems))
        return self._assign(meta, holders, len(plans)), meta

    def _assign(self, meta: Metadata, holders: dict, n: int) -> list:
        writes, loads = [[] for _ in range(n)], [0] * n

        def nbytes(fqn, sizes):
            return volume(sizes) * meta.state_dict_metadata[fqn].properties.dtype.itemsize

        for (fqn, offsets, sizes), ranks in sorted(holders.items(), key=lambda kv: (-nbytes(kv[0][0], kv[0][2]),
                                                                                    kv[0])):
            if not self.dedup:
                for r in ranks:
                    writes[r].append((fqn, offsets, sizes))
                pieces = [((offsets, sizes), ranks[0])]
            elif self.to_lowest or len(ranks) == 1:
                pieces = [((offsets, sizes), ranks[0])]
            elif nbytes(fqn, sizes) >= SPLIT_BYTES and sizes and sizes[0] >= len(ranks):
                lightest = sorted(ranks, key=lambda r: (loads[r], r))
                pieces = list(zip(split_rows(offsets, sizes, len(ranks)), lightest))
            else:
                pieces = [((offsets, sizes), min(ranks, key=lambda r: (loads[r], r)))]
            for (o, s), r in pieces:
                if self.dedup:
                    writes[r].append((fqn, o, s))
                loads[r] += nbytes(fqn, s)
                meta.state_dict_metadata[fqn].chunks.append(ChunkStorageMetadata(o, s))
        return writes

    @staticmethod
    def pieces(boxes_of: dict, writes: list, copy: bool) -> list:
        """This rank's share of the plan as Pieces (host arrays; copies when ``copy``, for async_save)."""
        out = []
        for fqn, offsets, sizes in writes:
            box_offsets, t = next((o, t) for o, t in boxes_of[fqn] if overlap(o, tuple(t.shape), offsets, sizes)
                                  == (offsets, sizes))   # (the plan gives a rank only pieces of boxes it holds)
            out.append(Piece(fqn, offsets, sizes, t.dtype, host_array(t[box_index(offsets, box_offsets, sizes)], copy)))
        return out


def _coverage(meta: Metadata, holders: dict) -> list:
    """Each tensor's boxes must tile it: inside it, not overlapping (unless equal), covering all of it."""
    problems, by_fqn = [], {}
    for (fqn, offsets, sizes), ranks in holders.items():
        by_fqn.setdefault(fqn, []).append((offsets, sizes, ranks))
    for fqn, boxes in by_fqn.items():
        size = meta.state_dict_metadata[fqn].size
        for offsets, sizes, ranks in boxes:
            if len(offsets) != len(size) or any(o < 0 or o + s > g for o, s, g in zip(offsets, sizes, size)):
                problems.append(f"{fqn!r}: rank {ranks[0]}'s box at {list(offsets)} of sizes {list(sizes)} is "
                                f"outside the tensor's size {list(size)}")
        for i, (oa, sa, ra) in enumerate(boxes):
            for ob, sb, rb in boxes[i + 1:]:
                if overlap(oa, sa, ob, sb) is not None:
                    problems.append(f"{fqn!r}: the boxes of rank {ra[0]} (at {list(oa)}) and rank {rb[0]} (at "
                                    f"{list(ob)}) overlap without being equal")
        covered = sum(volume(s) for _, s, _ in boxes)
        if not problems and covered != volume(size):
            problems.append(f"{fqn!r}: the ranks' boxes cover {covered} of its {volume(size)} elements")
    return problems


def _encode_value(value, fqn: str, what: str):
    """A plain value as JSON (numbers, strings, None, bools and containers of them), kept in the metadata."""
    try:
        return serialization._encode(value, fqn, serialization._Storages())
    except serialization._NeedsPickle as e:
        raise TypeError(f"{what}: the value {fqn!r} is not a tensor or a plain value ({e}); a checkpoint holds "
                        f"tensors, numbers, strings, None, bools and lists/tuples/dicts of them") from None


def decode_value(node):
    return serialization._decode(node, {}, {}, None)


class DefaultLoadPlanner:
    """torch's DefaultLoadPlanner arguments: ``allow_partial_load=True`` skips the keys the checkpoint lacks
    instead of failing. minidl always flattens."""

    def __init__(self, flatten_state_dict: bool = True, flatten_sharded_tensors: bool = True,
                 allow_partial_load: bool = False):
        if not (flatten_state_dict and flatten_sharded_tensors):
            raise ValueError("DefaultLoadPlanner: minidl always flattens the state dict (flatten_state_dict and "
                             "flatten_sharded_tensors must be True)")
        self.allow_partial_load = allow_partial_load

    def read_plan(self, leaves: dict, meta: Metadata, where: str, what: str):
        """(file -> [Read], key -> the value to put back): what this rank reads; every key that does not
        match the checkpoint named, all in one error."""
        reads, values, problems = {}, {}, []
        missing = [fqn for fqn in leaves if fqn not in meta.state_dict_metadata]
        for fqn, leaf in leaves.items():
            entry = meta.state_dict_metadata.get(fqn)
            found = slices_of(leaf)
            if entry is None:
                continue
            if isinstance(entry, BytesStorageMetadata):
                if found is not None:
                    problems.append(f"{fqn!r} is a tensor here but a plain value in the checkpoint")
                else:
                    values[fqn] = decode_value(meta.values[fqn])
                continue
            if found is None:
                problems.append(f"{fqn!r} is a tensor in the checkpoint but a {type(leaf).__name__} here")
                continue
            size, boxes = found
            if tuple(size) != tuple(entry.size):
                problems.append(f"{fqn!r} has size {list(entry.size)} in the checkpoint but {list(size)} here")
                continue
            for offsets, t in boxes:
                self._plan_box(fqn, entry, meta, tuple(offsets), t, reads)
        if missing and not self.allow_partial_load:
            spare = sorted(set(meta.state_dict_metadata) - set(leaves))
            problems.insert(0, f"missing from the checkpoint: {missing}" +
                            (f" (it has instead: {spare[:20]}{' ...' if len(spare) > 20 else ''})" if spare else ""))
        if problems:
            raise ValueError(f"{what}: the checkpoint at {where} does not match the state dict: " + "; ".join(problems))
        return reads, values

    @staticmethod
    def _plan_box(fqn, entry, meta, offsets, t, reads) -> None:
        """The reads that fill box ``t``: for each stored chunk it overlaps, the overlap's runs of bytes — or,
        where those are many (a split along a late dimension: one per row), the one span from the overlap's
        first byte to its last, cut out by strides after reading (the 1 MiB blocks it touches are read
        either way)."""
        itemsize = entry.properties.dtype.itemsize
        for chunk in entry.chunks:
            met = overlap(chunk.offsets, chunk.sizes, offsets, tuple(t.shape))
            if met is None:
                continue
            where = meta.storage_data[MetadataIndex(fqn, chunk.offsets)]
            if run_count(chunk.sizes, met[1]) <= MAX_RUNS:
                elements = runs(chunk.offsets, chunk.sizes, *met)
                strides = row_major_strides(met[1])
            else:
                start, stop = span(chunk.offsets, chunk.sizes, *met)
                elements, strides = [(start, stop - start)], row_major_strides(chunk.sizes)
            ranges = [(where.offset + start * itemsize, length * itemsize) for start, length in elements]
            target = t[box_index(met[0], offsets, met[1])]
            reads.setdefault(where.relative_path, []).append(Read(ranges, entry.properties.dtype, met[1], strides,
                                                                  target))


@dataclasses.dataclass
class Read:
    """Byte ranges of one file whose bytes, one after the other, hold a box of ``sizes`` with element
    ``strides`` from their start; for ``target`` (a view of a tensor being loaded)."""
    ranges: list
    dtype: object
    sizes: tuple
    strides: tuple
    target: Tensor
