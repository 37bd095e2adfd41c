"""Vision utilities, as in ``torchvision``: image transforms, a small embedded dataset (8x8 digits),
readers for datasets the user has placed on disk (MNIST, Fashion-MNIST, CIFAR-10, MovieLens, text), and
torchvision's classification models with the building blocks they share (``ops``)."""
from . import datasets, models, ops, transforms

__all__ = ["datasets", "models", "ops", "transforms"]
