"""``torch.backends.mps``: Apple's GPUs are not a minidl device."""


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
