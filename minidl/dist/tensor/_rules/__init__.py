"""The sharding rules of minidl's ops (attached to the registry's declarations, as ONNX lowerings are)."""
from . import elementwise, linalg, nn, optim, reduction, views  # noqa: F401
