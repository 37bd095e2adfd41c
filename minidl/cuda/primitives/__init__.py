"""The CUDA backend's primitives: importing this package registers every one for device "cuda".

Each wrapper checks its arguments, turns layouts into the kernels' ``Layout`` structs and launches
a kernel of ``minidl/cuda/csrc`` through ``minidl.cuda.runtime`` (CuPy on a GPU, or the
simulator). Importing needs neither CuPy nor a GPU; running a kernel needs one of the runtimes.
"""
from . import conv, elementwise, indexing, linalg, memory, optim, random, reduce, softmax  # noqa: F401  (registration)
