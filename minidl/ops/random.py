"""Random number generation: counter-based generators whose whole state is (seed, offset).

Tensor draws run the ``random`` primitive (Philox4x32-10) on the tensor's own device: element i of
a draw is a function of (seed, offset + i) only, so nothing crosses to the host and a seed gives
the same numbers on every device. Each draw advances ``offset`` by the elements it used. Work
that is host work anyway (the DataLoader's shuffles, randperm, multinomial) draws from a numpy
generator seeded with the current (seed, offset), then advances offset by one.
"""
from __future__ import annotations

import struct
import threading

import numpy as np

from .. import _tracing, kernels
from .._tensor_base import as_device
from .._tensor_base import empty as _empty
from .core import from_host_array

DEFAULT_SEED = 67280421310721
_STATE = struct.Struct("<QQ")  # seed, offset


def _reseeded() -> None:
    """A generator is reseeded: a replay of minidl.compile draws on from where each generator stands, so
    a call that sets one (and would draw the same numbers every time) is a graph break."""
    if _tracing.captures:
        _tracing.graph_break("a generator is reseeded or set to another state during the call")


class Generator:
    def __init__(self, device="cpu"):
        self.device = as_device(device)
        self._seed = DEFAULT_SEED
        self._offset = 0

    def manual_seed(self, seed: int) -> "Generator":
        _reseeded()
        self._seed = int(seed) % (1 << 64)  # negative seeds wrap, as in PyTorch
        self._offset = 0
        return self

    def seed(self) -> int:
        """Seed from the operating system's entropy; returns the new seed."""
        return self.manual_seed(int(np.random.SeedSequence().entropy) % (1 << 63))._seed

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """(seed, offset) as 16 bytes of a CPU uint8 tensor (for set_state and checkpoints)."""
        return from_host_array(np.frombuffer(_STATE.pack(self._seed, self._offset), dtype=np.uint8), "cpu")

    def set_state(self, new_state) -> "Generator":
        raw = bytes(np.asarray(new_state.cpu().numpy() if hasattr(new_state, "_layout") else new_state, np.uint8))
        if len(raw) != _STATE.size:
            raise RuntimeError(f"set_state: expected a state of {_STATE.size} bytes (seed, offset), got {len(raw)}")
        _reseeded()
        self._seed, self._offset = _STATE.unpack(raw)
        return self

    @classmethod
    def at(cls, device, seed: int, offset: int) -> "Generator":
        """A generator in state (seed, offset): to draw again what a kernel drew from that state."""
        found = cls(device)
        found._seed, found._offset = seed, offset
        return found

    def claim(self, count: int):
        """(seed, offset) for a draw of ``count`` counters, which the generator then moves past."""
        offset = self._offset
        self._offset = (offset + count) % (1 << 64)
        recorder = _tracing.recording()
        if recorder is not None:
            recorder.claim(self, self._seed, offset, count)
        return self._seed, offset

    @property
    def numpy(self) -> np.random.Generator:
        """A numpy generator for one host-side draw (a fresh stream for every use)."""
        _tracing.graph_break("random numbers are drawn on the host (randperm, multinomial, a shuffle)")
        seed, offset = self.claim(1)
        return np.random.Generator(np.random.PCG64([seed, offset]))


default_generator = Generator()
_thread = threading.local()   # a thread's own default CPU generator, where it has one (a simulated rank's)


def cpu_default() -> Generator:
    """The default CPU generator of this thread: the process's, or the one ``own_default`` gave it."""
    return getattr(_thread, "generator", None) or default_generator


def own_default(generator: Generator) -> None:
    """Give this thread a default CPU generator of its own: minidl.dist.sim's ranks, each a process of its own,
    draw their own streams (as forked processes would), not interleaved draws from one."""
    _thread.generator = generator
_cuda_generators: dict = {}   # cuda device index -> its default generator
_cuda_seed = [DEFAULT_SEED]   # the seed new ones start from


def device_generator(device) -> Generator:
    """The default generator of ``device`` (one per GPU, as in PyTorch; the CPU's for 'cpu')."""
    device = as_device(device)
    if device.type == "cpu":
        return cpu_default()
    if device.type == "meta":
        return Generator(device)   # (a meta tensor draws nothing: a throwaway one, so that no stream moves)
    found = _cuda_generators.get(device.index)
    if found is None:
        found = _cuda_generators[device.index] = Generator(device).manual_seed(_cuda_seed[0])
    return found


def seed_cuda(seed: int, index=None) -> None:
    """Seed one GPU's default generator, or (index None) all of them, present and future."""
    if index is None:
        _cuda_seed[0] = seed
        for g in _cuda_generators.values():
            g.manual_seed(seed)
    else:
        device_generator(f"cuda:{index}").manual_seed(seed)


def manual_seed(seed: int) -> Generator:
    seed_cuda(seed)
    return cpu_default().manual_seed(seed)


def seed() -> int:
    value = cpu_default().seed()
    seed_cuda(value)
    return value


def initial_seed() -> int:
    return cpu_default().initial_seed()


def get_rng_state():
    return cpu_default().get_state()


def set_rng_state(new_state) -> None:
    cpu_default().set_state(new_state)


def numpy_generator(generator=None) -> np.random.Generator:
    return (generator or cpu_default()).numpy


def draw(kind: str, shape, dtype, device, a, b, generator=None):
    """A new tensor of ``shape`` filled on ``device`` by the random primitive (``kind`` in
    kernels.RANDOM_KINDS; dtype float32/float64, int64 for integers). A meta tensor draws nothing, and so leaves
    the generator where it stands (as torch's: a model built on 'meta' and initialised later under a seed gets
    the numbers it would have got built under that seed)."""
    device = as_device(device)
    out = _empty(shape, dtype, device)
    if out._layout.numel and device.type != "meta":
        seed, offset = (generator or device_generator(device)).claim(out._layout.numel)
        kernels.get("random", device.type)(kind, out._storage.buf, seed, offset, a, b)
    return out
