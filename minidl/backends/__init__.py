"""``torch.backends``' switches, for scripts that set them. minidl has no cuDNN, TF32 or MPS, so
each flag is a plain attribute that changes nothing."""
from . import cuda, cudnn, mps  # noqa: F401
