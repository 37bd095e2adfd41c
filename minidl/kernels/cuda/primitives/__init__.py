"""The CUDA kernels of every primitive: importing this package registers every one for device "cuda".

Each wrapper checks its arguments, turns layouts into the kernels' ``Layout`` structs and launches
a kernel of ``minidl/kernels/cuda/csrc`` through ``minidl.kernels.cuda.runtime`` (CuPy on a GPU, or the
simulator). Importing needs neither CuPy nor a GPU; running a kernel needs one of the runtimes.
"""
from . import (attention, batch_norm, conv, cross_entropy, elementwise, fused, indexing, linalg, memory,  # noqa: F401
               multi_tensor, norm_rows, optim, random, reduce, rnn, softmax)  # (registration)
