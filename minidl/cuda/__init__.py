"""``minidl.cuda``, as ``torch.cuda``: whether device 'cuda' can run, synchronisation, memory
statistics, streams, events, graphs and the GPUs' random generators.

Imported by ``import minidl``, so it imports nothing heavy: CuPy is loaded by the runtime the
first time a function here (or a CUDA tensor) needs the device. Device 'cuda' runs on a GPU
through CuPy, or on the CPU simulator after :func:`sim_enable` / ``MINIDL_CUDA_SIM=1``.
"""
from ..kernels.cuda.runtime import sim_enable  # noqa: F401
from ..ops import random as _random
from . import amp  # noqa: F401  (torch.cuda.amp's spelling)
from .devices import (current_device, device_count, empty_cache, is_available, max_memory_allocated,  # noqa: F401
                      max_memory_reserved, mem_get_info, memory_allocated, memory_reserved, reset_peak_memory_stats,
                      set_device, synchronize)
from .devices import _current, _index
from .graphs import CUDAGraph, graph, graph_pool_handle, is_current_stream_capturing  # noqa: F401
from .streams import CudaEvent as Event, CudaStream as Stream  # noqa: F401
from .streams import StreamContext, current_stream, default_stream, set_stream, stream  # noqa: F401


# ----------------------------------------------------------------------------- random generators
def _generator(device=None):
    return _random.device_generator(f"cuda:{_index(device) if device is not None else _current[0]}")


def manual_seed(seed: int) -> None:
    """Seed the current GPU's generator."""
    _random.seed_cuda(int(seed), _current[0])


def manual_seed_all(seed: int) -> None:
    _random.seed_cuda(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    _random.seed_cuda(_generator().seed())


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device="cuda"):
    """The generator state of a GPU: a CPU uint8 tensor of 16 bytes (seed, offset)."""
    return _generator(device).get_state()


def set_rng_state(new_state, device="cuda") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
