"""torch.linalg's counterpart: the ops declared in the "linalg" namespace (registered under aten's names,
``linalg_vector_norm`` is ``minidl.linalg.vector_norm``)."""
from .ops import registry as _registry
from .ops.factorisations import LinAlgError  # noqa: F401

globals().update(_registry.functions("linalg"))
