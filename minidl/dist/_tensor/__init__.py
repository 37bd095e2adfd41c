"""The old path of minidl.dist.tensor (torch.distributed._tensor), which real scripts still import."""
from ..tensor import *  # noqa: F401,F403
from ..tensor import __all__  # noqa: F401
