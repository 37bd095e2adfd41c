"""Random number generation: a seeded generator whose state can be saved and restored.

Numbers are drawn on the host with numpy's PCG64 and copied to the tensor's
device, so a seed gives the same values on every device.
"""
from __future__ import annotations

import numpy as np

_STATE_BYTES = 40  # 128-bit state, 128-bit increment, has_uint32 flag, cached uint32


class Generator:
    def __init__(self, device="cpu"):
        self.device = device
        self._seed = 67280421310721
        self._np = np.random.Generator(np.random.PCG64(self._seed))

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        self._np = np.random.Generator(np.random.PCG64(self._seed))
        return self

    def seed(self) -> int:
        return self.manual_seed(int(np.random.SeedSequence().entropy) % (1 << 63))._seed

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """The whole generator state as a uint8 tensor (opaque, for set_state)."""
        from .creation import from_numpy
        s = self._np.bit_generator.state
        raw = (s["state"]["state"].to_bytes(16, "little") + s["state"]["inc"].to_bytes(16, "little")
               + int(s["has_uint32"]).to_bytes(4, "little") + int(s["uinteger"]).to_bytes(4, "little"))
        return from_numpy(np.frombuffer(raw, dtype=np.uint8).copy())

    def set_state(self, new_state) -> "Generator":
        raw = bytes(np.asarray(new_state.numpy() if hasattr(new_state, "numpy") else new_state, np.uint8))
        if len(raw) != _STATE_BYTES:
            raise RuntimeError(f"set_state: expected a state of {_STATE_BYTES} bytes, got {len(raw)}")
        bit_gen = np.random.PCG64()
        bit_gen.state = {"bit_generator": "PCG64",
                         "state": {"state": int.from_bytes(raw[:16], "little"),
                                   "inc": int.from_bytes(raw[16:32], "little")},
                         "has_uint32": int.from_bytes(raw[32:36], "little"),
                         "uinteger": int.from_bytes(raw[36:40], "little")}
        self._np = np.random.Generator(bit_gen)
        return self

    @property
    def numpy(self) -> np.random.Generator:
        return self._np


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(new_state) -> None:
    default_generator.set_state(new_state)


def numpy_generator(generator=None) -> np.random.Generator:
    return (generator or default_generator).numpy
