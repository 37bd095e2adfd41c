"""Vision utilities, as in ``torchvision``: image transforms and a small embedded dataset (8x8 digits)."""
from . import datasets, transforms

__all__ = ["datasets", "transforms"]
