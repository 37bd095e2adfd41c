"""``torch.backends.cudnn``: flags kept for scripts that set them; minidl does not use cuDNN."""
enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    return False


def version():
    return None
