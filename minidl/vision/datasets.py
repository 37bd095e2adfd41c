"""Datasets, as in ``torchvision.datasets`` (no download, ever): the embedded 8x8 handwritten digits, and
readers for files the user has placed: MNIST, FashionMNIST, CIFAR10 (``image_readers``), MovieLens and
TextDataset (``text_readers``).

The digits (1,797 images, 10 classes, pixels 0..16; UCI optdigits via scikit-learn) are read from
scikit-learn when it is installed, else from the copy shipped in ``minidl/vision/data/``.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import minidl

from ..utils.data import Dataset
from .image_readers import CIFAR10, MNIST, FashionMNIST, VisionDataset, read_idx
from .text_readers import MovieLens, TextDataset, write_movielens


__all__ = ["Digits", "load_digits", "digits_split", "VisionDataset", "MNIST", "FashionMNIST", "CIFAR10",
           "read_idx", "MovieLens", "TextDataset", "write_movielens"]

DATA_FILE = Path(__file__).with_name("data") / "digits.csv.gz"
N_SAMPLES = 1797
TRAIN_FRACTION = 0.8
SPLIT_SEED = 20240607  # fixed: the split is the same on every run and machine

_cache: dict = {}


def _from_file() -> tuple[np.ndarray, np.ndarray]:
    raw = np.loadtxt(DATA_FILE, delimiter=",", dtype=np.float64)
    return raw[:, :-1].reshape(-1, 8, 8), raw[:, -1].astype(np.int64)


def _from_sklearn() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits as sk_load_digits
    bunch = sk_load_digits()
    return np.asarray(bunch.images, dtype=np.float64), np.asarray(bunch.target, dtype=np.int64)


def load_digits(source: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """(images, targets): float64 images of shape (1797, 8, 8) with values 0..16, int64 labels 0..9.

    ``source``: ``"auto"`` (scikit-learn if installed, else the shipped file), ``"sklearn"`` or
    ``"file"``. The arrays are fresh copies.
    """
    if source not in ("auto", "sklearn", "file"):
        raise ValueError(f"source must be 'auto', 'sklearn' or 'file', got {source!r}")
    if source == "auto":
        try:
            import sklearn.datasets  # noqa: F401
            source = "sklearn"
        except ImportError:
            source = "file"
    if source not in _cache:
        images, targets = _from_sklearn() if source == "sklearn" else _from_file()
        if images.shape != (N_SAMPLES, 8, 8) or targets.shape != (N_SAMPLES,):
            raise RuntimeError(f"digits data has unexpected shapes {images.shape}, {targets.shape}")
        _cache[source] = (images, targets)
    images, targets = _cache[source]
    return images.copy(), targets.copy()


def digits_split(targets: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, test indices): a fixed, seeded, stratified 80/20 split, each sorted.

    Every class is shuffled with its own seeded generator and its first ``round(0.8 * n)``
    samples go to train, so the split is disjoint, covers everything and never changes.
    """
    if targets is None:
        targets = load_digits()[1]
    targets = np.asarray(targets)
    train, test = [], []
    for c in np.unique(targets):
        idx = np.flatnonzero(targets == c)
        perm = np.random.Generator(np.random.PCG64([SPLIT_SEED, int(c)])).permutation(idx)
        n_train = int(math.floor(TRAIN_FRACTION * len(idx) + 0.5))
        train.append(perm[:n_train])
        test.append(perm[n_train:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


class Digits(Dataset):
    """The 8x8 handwritten digits: ``(image, label)`` pairs of a fixed stratified 80/20 split.

    Without a transform the image is a float32 tensor of shape (1, 8, 8) in [0, 1] (pixels / 16).
    With one, the transform receives the image as an (8, 8) float32 numpy array in [0, 1]
    (``transforms.ToTensor()`` then gives the default). Labels are ints 0..9.
    ``data`` holds the raw uint8 pixels 0..16 of this split (N, 8, 8), ``targets`` the int64 labels.
    """

    classes = [str(d) for d in range(10)]

    def __init__(self, root=None, train: bool = True, transform=None, target_transform=None):
        if isinstance(root, bool):  # Digits(False) means train=False, not a root directory
            root, train = None, root
        self.root = root  # accepted for torchvision compatibility; nothing is ever read from or written to it
        self.train = bool(train)
        self.transform = transform
        self.target_transform = target_transform
        images, targets = load_digits()
        train_idx, test_idx = digits_split(targets)
        self.indices = train_idx if self.train else test_idx
        self.data = images[self.indices].astype(np.uint8)
        self.targets = targets[self.indices]

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        image = self.data[index].astype(np.float32) / np.float32(16.0)
        target = int(self.targets[index])
        if self.transform is not None:
            image = self.transform(image)
        else:
            image = minidl.from_numpy(np.ascontiguousarray(image[None]))
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    def __repr__(self) -> str:
        return f"Dataset Digits\n    Number of datapoints: {len(self)}\n    Split: {'Train' if self.train else 'Test'}"
