"""minidl.dist.checkpoint: distributed checkpoints with torch.distributed.checkpoint's names (being built)."""
from . import state_dict  # noqa: F401
