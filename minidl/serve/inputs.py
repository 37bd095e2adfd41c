"""Request bodies to arrays: the body read under a size limit, JSON parsed, ``inputs`` checked to be a rectangular
nest of numbers, and told apart as one example or a list of them. Each refusal is an ``InputError`` carrying the
HTTP status and a message naming the problem."""
from __future__ import annotations

import json
import numbers

import numpy as np

__all__ = ["InputError", "read_body", "json_object", "parse_inputs", "to_array", "as_examples"]


class InputError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


async def read_body(request, max_bytes: int) -> bytes:
    """The body, refused with 413 as soon as it passes ``max_bytes`` (from Content-Length when sent, else while the
    chunks arrive), so an oversize upload is never held in memory whole."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise InputError(413, f"body of {int(declared)} bytes is over the limit of {max_bytes} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise InputError(413, f"body is over the limit of {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def json_object(body: bytes, wanted: str = "a JSON object") -> dict:
    """The JSON object a request body holds: 400 when it is no JSON, 422 when it is not ``wanted`` (an object)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise InputError(400, f"body is not valid JSON: {error}") from None
    except RecursionError:
        raise InputError(400, "body is JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(422, f"body must be {wanted}, got a {type(data).__name__}")
    return data


def parse_inputs(body: bytes):
    """The ``inputs`` field of a JSON object body."""
    data = json_object(body, 'a JSON object with "inputs"')
    if "inputs" not in data:
        raise InputError(422, f'body has no "inputs" field (fields: {", ".join(map(repr, data)) or "none"})')
    return data["inputs"]


def to_array(value, dtype) -> np.ndarray:
    """``value`` (nested lists of numbers, or an array a preprocess hook returned) as an array of ``dtype``. numpy
    reads a regular nest in C (an image is ~150k numbers); only a nest it cannot read as numbers is walked in Python,
    to name the bad element. Integer dtypes refuse fractional numbers rather than truncate them."""
    dtype = np.dtype(dtype)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise InputError(422, f"inputs: an array of {value.dtype}, not real numbers")
        return _convert(value, dtype)
    try:
        leaves = np.array(value, dtype=object)
    except (ValueError, RuntimeError):                 # (numpy's own limit on dimensions, or a recursion limit)
        leaves = None
    if leaves is None or not all(issubclass(kind, numbers.Real) and not issubclass(kind, (bool, np.bool_))
                                 for kind in set(map(type, leaves.flat))):
        try:
            shape = _shape(value, "inputs")
        except RecursionError:
            raise InputError(422, "inputs are nested too deeply") from None
        raise InputError(422, f"inputs of shape {list(shape)}: more dimensions than numpy holds")
    return _convert(leaves, dtype)


def _convert(leaves: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu" and leaves.dtype.kind in "fO":
        _refuse_fractions(leaves, dtype)
    try:
        return leaves.astype(dtype, copy=False)
    except OverflowError as error:
        raise InputError(422, f"inputs: a number does not fit {dtype}: {error}") from None


def _refuse_fractions(leaves: np.ndarray, dtype: np.dtype) -> None:
    """A number with a fraction (or NaN, infinity) for an integer input is an error: truncating it would answer a
    question the client did not ask."""
    try:
        as_float = leaves.astype(np.float64)
    except OverflowError:
        return                                         # (an int past float64's range: the cast to dtype says so)
    bad = ~(np.isfinite(as_float) & (as_float == np.floor(as_float)))
    if bad.any():
        index = np.unravel_index(int(np.argmax(bad)), bad.shape)
        where = "inputs" + "".join(f"[{i}]" for i in index)
        raise InputError(422, f"{where}: {leaves[index]} is not a whole number, and the model takes {dtype}")


def _shape(value, where: str) -> tuple:
    """The shape of a rectangular nest of numbers, refusing ragged lists and anything not a number."""
    if isinstance(value, bool) or not isinstance(value, (list, numbers.Real)):
        raise InputError(422, f"{where}: {json.dumps(value)[:60]} is not a number")
    if not isinstance(value, list):
        return ()
    if not value:
        return (0,)
    shapes = [_shape(item, f"{where}[{i}]") for i, item in enumerate(value)]
    for i, shape in enumerate(shapes):
        if shape != shapes[0]:
            raise InputError(422, f"{where} is ragged: {where}[0] has shape {list(shapes[0])}, "
                                  f"{where}[{i}] has shape {list(shape)}")
    return (len(value), *shapes[0])


def as_examples(array: np.ndarray, example_ndim: int | None) -> tuple:
    """``(examples, single)``: the array with examples on axis 0, and whether the request sent one example (whose
    answer is then one output, not a list). Without a known example rank, a vector is one example and anything
    deeper a list of examples."""
    if example_ndim is None:
        single = array.ndim <= 1
    elif array.ndim in (example_ndim, example_ndim + 1):
        single = array.ndim == example_ndim
    else:
        raise InputError(422, f"inputs of shape {list(array.shape)}: the model takes examples of {example_ndim} "
                              f"dimension(s), so one example or a list of them ({example_ndim + 1} dimensions)")
    examples = array[None] if single else array
    if len(examples) == 0 or 0 in examples.shape:
        raise InputError(422, f"inputs of shape {list(array.shape)} hold no numbers")
    return examples, single
