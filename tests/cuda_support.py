"""Running CUDA tests without a GPU: the ``cuda`` fixture gives device 'cuda' on a real GPU when
CuPy sees one, else on the simulator (minidl/kernels/cuda/sim: the same kernel sources compiled by g++
and run on the CPU), which checks the kernels' index math on every machine with a C++ compiler."""
import shutil

import numpy as np
import pytest

from minidl import kernels
from minidl.kernels.cuda import runtime


def cuda_device():
    """Switch device 'cuda' to a runtime (a GPU if there is one) and return its name, or skip."""
    runtime.sim_enable(False)
    if runtime.gpu_available():
        return runtime.get().name
    if shutil.which("g++") is None:
        pytest.skip("no GPU and no g++ for the CUDA simulator")
    runtime.sim_enable(True)
    return runtime.get().name


def sim_cuda_device():
    """Switch device 'cuda' to the simulator even where a GPU is (for tests that need host arrays
    behind 'cuda' tensors), or skip."""
    if shutil.which("g++") is None:
        pytest.skip("no g++ for the CUDA simulator")
    runtime.sim_enable(True)
    return runtime.get().name


def both(array):
    """The same 1-D buffer on the CPU and on 'cuda'."""
    array = np.ascontiguousarray(array).reshape(-1)
    return array.copy(), kernels.get("from_host", "cuda")(array)


def host(buf):
    return kernels.get("to_host", "cuda")(buf)


@pytest.fixture
def cuda():
    """Device 'cuda' (a GPU, else the simulator) for one test; the default stream and the runtime as they were
    after it (import it into a test module to use it)."""
    import minidl
    saved = runtime._sim_requested
    cuda_device()
    yield
    minidl.cuda.set_stream(minidl.cuda.default_stream())
    runtime.sim_enable(saved)
