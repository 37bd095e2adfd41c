"""Vision utilities, as in ``torchvision``: image transforms, a small embedded dataset (8x8 digits), and
readers for datasets the user has placed on disk (MNIST, Fashion-MNIST, CIFAR-10, MovieLens, text)."""
from . import datasets, transforms

__all__ = ["datasets", "transforms"]
