"""``torch.backends.cuda``: ``matmul.allow_tf32`` and kin, kept for scripts that set them."""
from types import SimpleNamespace

matmul = SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                         allow_bf16_reduced_precision_reduction=True)


def is_built() -> bool:
    return False
