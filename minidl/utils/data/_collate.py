"""default_collate and default_convert, as in ``torch.utils.data._utils.collate``."""
from __future__ import annotations

import collections.abc
import copy
import re

import numpy as np

import minidl


__all__ = ["collate", "default_collate", "default_collate_fn_map", "default_convert"]

np_str_obj_array_pattern = re.compile(r"[SaUO]")

default_collate_err_msg_format = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}")


def _as_tensor(array):
    return minidl.as_tensor(array)


def default_convert(data):
    """Numpy arrays (not of strings or objects) become tensors, recursively inside mappings,
    namedtuples and sequences; everything else is left as is (used when ``batch_size=None``)."""
    elem_type = type(data)
    if isinstance(data, minidl.Tensor):
        return data
    if elem_type.__module__ == "numpy" and elem_type.__name__ not in ("str_", "string_"):
        if elem_type.__name__ == "ndarray" and np_str_obj_array_pattern.search(data.dtype.str) is not None:
            return data
        return _as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update({key: default_convert(data[key]) for key in data})
                return clone
            return elem_type({key: default_convert(data[key]) for key in data})
        except TypeError:
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return elem_type(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return elem_type([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def collate(batch, *, collate_fn_map=None):
    """Collate a list of samples, dispatching on the type of the first one through ``collate_fn_map``
    (exact type first, then ``isinstance``), recursing into mappings, namedtuples and sequences."""
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for collate_type in collate_fn_map:
            if isinstance(elem, collate_type):
                return collate_fn_map[collate_type](batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update({key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem})
                return clone
            return elem_type({key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem})
        except TypeError:
            return {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return elem_type(*(collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, samples in enumerate(transposed):
                    clone[i] = collate(samples, collate_fn_map=collate_fn_map)
                return clone
            return elem_type([collate(samples, collate_fn_map=collate_fn_map) for samples in transposed])
        except TypeError:
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
    raise TypeError(default_collate_err_msg_format.format(elem_type))


def collate_tensor_fn(batch, *, collate_fn_map=None):
    return minidl.stack(list(batch), 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    elem = batch[0]
    if np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise TypeError(default_collate_err_msg_format.format(elem.dtype))
    return collate([_as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    return minidl.from_numpy(np.asarray(batch))  # keeps the scalars' dtype (np.float64 -> float64)


def collate_float_fn(batch, *, collate_fn_map=None):
    return minidl.tensor(list(batch), dtype=minidl.float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    return minidl.tensor(list(batch))


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


def _numpy_dispatch(batch, *, collate_fn_map=None):
    elem = batch[0]
    if isinstance(elem, np.ndarray):
        return collate_numpy_array_fn(batch, collate_fn_map=collate_fn_map)
    if elem.shape == ():  # numpy scalar
        return collate_numpy_scalar_fn(batch, collate_fn_map=collate_fn_map)
    raise TypeError(default_collate_err_msg_format.format(type(elem)))


default_collate_fn_map = {minidl.Tensor: collate_tensor_fn, np.ndarray: collate_numpy_array_fn,
                          np.generic: _numpy_dispatch, float: collate_float_fn, int: collate_int_fn,
                          str: collate_str_fn, bytes: collate_str_fn}


def default_collate(batch):
    """Collate a list of samples into a batch, as PyTorch does: tensors are stacked; numpy arrays and
    numpy scalars become tensors (keeping their dtype); Python floats become float64, ints int64 and
    bools bool tensors; strings and bytes stay a list; mappings are collated per key, namedtuples per
    field, other sequences elementwise (tuples give lists)."""
    return collate(batch, collate_fn_map=default_collate_fn_map)
