"""ONNX's element type codes (TensorProto.DataType) for minidl's and numpy's dtypes, without
importing ``onnx``."""
import numpy as np

CODES = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3, np.dtype(np.uint16): 4,
         np.dtype(np.int16): 5, np.dtype(np.int32): 6, np.dtype(np.int64): 7, np.dtype(np.bool_): 9,
         np.dtype(np.float16): 10, np.dtype(np.float64): 11, np.dtype(np.uint32): 12, np.dtype(np.uint64): 13}


def numpy_dtype(dtype) -> np.dtype:
    """A minidl dtype's numpy dtype (or a numpy one, as it is)."""
    np_dtype = getattr(dtype, "np", None)
    if getattr(dtype, "name", None) == "bfloat16" or (np_dtype is None and not isinstance(dtype, (np.dtype, type))):
        raise TypeError(f"minidl.onnx.export: dtype {dtype.name} has no ONNX element type here")
    return np.dtype(np_dtype if np_dtype is not None else dtype)


def code(dtype) -> int:
    np_dtype = numpy_dtype(dtype)
    if np_dtype not in CODES:
        raise TypeError(f"minidl.onnx.export: dtype {np_dtype} has no ONNX element type here")
    return CODES[np_dtype]
