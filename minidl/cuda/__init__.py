"""The package of the CUDA backend (its kernels are to come). Imported by ``import minidl``, so it
imports nothing heavy: for now, whether a GPU can be used, as ``torch.cuda`` tells scripts."""
import importlib.util

from . import amp  # noqa: F401  (torch.cuda.amp's spelling)


def device_count() -> int:
    """How many GPUs CuPy sees (0 without CuPy, a driver or a GPU)."""
    if importlib.util.find_spec("cupy") is None:
        return 0
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # CuPy installed but no usable driver or device: its errors vary by version
        return 0


def is_available() -> bool:
    """True when a GPU can run minidl's kernels: CuPy sees one *and* the CUDA primitives are
    registered (until they are, scripts that test this fall back to the CPU, as they should)."""
    from .. import kernels
    return bool(kernels.registered("cuda")) and device_count() > 0

