"""The embedded 8x8 digits: the shipped file, the stratified split, the Dataset, and that it is real data."""
import gzip
import hashlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import minidl
from minidl.utils.data import DataLoader
from minidl.vision import datasets, transforms
from minidl.vision.datasets import Digits, digits_split, load_digits

CLASS_COUNTS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
DATA_FILE = Path(datasets.__file__).parent / "data" / "digits.csv.gz"
SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"
HAS_SKLEARN = importlib.util.find_spec("sklearn") is not None


def test_data_file_shipped_small_and_unchanged():
    assert DATA_FILE.is_file()
    assert DATA_FILE.stat().st_size < 100_000
    assert hashlib.sha256(DATA_FILE.read_bytes()).hexdigest() == SHA256
    assert (DATA_FILE.parent / "README.md").is_file()


def test_data_file_contents():
    with gzip.open(DATA_FILE, "rt") as f:
        rows = [line.strip().split(",") for line in f if line.strip()]
    assert len(rows) == 1797
    assert {len(r) for r in rows} == {65}
    raw = np.array(rows, dtype=np.float64)
    assert np.array_equal(raw, np.round(raw))
    assert raw[:, :-1].min() == 0 and raw[:, :-1].max() == 16
    assert np.bincount(raw[:, -1].astype(int)).tolist() == CLASS_COUNTS


def test_package_data_declared():
    tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")
    root = Path(__file__).resolve().parent.parent
    config = tomllib.loads((root / "pyproject.toml").read_text())
    assert "vision/data/*" in config["tool"]["setuptools"]["package-data"]["minidl"]


@pytest.mark.parametrize("source", ["auto", "file"])
def test_load_digits(source):
    images, targets = load_digits(source)
    assert images.shape == (1797, 8, 8) and targets.shape == (1797,)
    assert targets.dtype == np.int64
    assert images.min() == 0 and images.max() == 16
    assert np.bincount(targets).tolist() == CLASS_COUNTS
    images[0, 0, 0] = 99  # a copy: the cache is untouched
    assert load_digits(source)[0][0, 0, 0] != 99


@pytest.mark.skipif(not HAS_SKLEARN, reason="scikit-learn not installed")
def test_shipped_file_matches_sklearn():
    a, b = load_digits("file"), load_digits("sklearn")
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_bad_source():
    with pytest.raises(ValueError):
        load_digits("internet")


def test_split_stratified_disjoint_covering():
    targets = load_digits()[1]
    train, test = digits_split(targets)
    assert len(np.intersect1d(train, test)) == 0
    assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(1797))
    assert len(train) == 1438 and len(test) == 359
    for c in range(10):
        n = CLASS_COUNTS[c]
        n_train = int((targets[train] == c).sum())
        assert abs(n_train - 0.8 * n) <= 0.5
        assert n_train + int((targets[test] == c).sum()) == n


def test_split_deterministic_and_independent_of_global_rng():
    minidl.manual_seed(1)
    np.random.seed(1)
    a = digits_split()
    minidl.manual_seed(2)
    np.random.seed(2)
    b = digits_split()
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    # pinned: the split must not change between versions
    assert a[0][:10].tolist() == [1, 2, 4, 6, 9, 10, 11, 12, 13, 14]
    assert a[1][:10].tolist() == [0, 3, 5, 7, 8, 28, 33, 34, 36, 46]
    assert np.array_equal(Digits(train=True).indices, a[0])
    assert np.array_equal(Digits(train=False).indices, a[1])


def test_dataset_items():
    ds = Digits(train=True)
    images, targets = load_digits()
    assert len(ds) == 1438 and len(Digits(train=False)) == 359
    x, y = ds[5]
    assert isinstance(x, minidl.Tensor)
    assert tuple(x.shape) == (1, 8, 8) and x.dtype == minidl.float32
    assert isinstance(y, int) and 0 <= y <= 9
    i = ds.indices[5]
    np.testing.assert_allclose(x.numpy()[0], images[i] / 16.0, rtol=0, atol=1e-7)
    assert y == targets[i]
    assert ds.data.shape == (1438, 8, 8) and ds.data.dtype == np.uint8
    assert ds.data.max() == 16
    all_x = np.stack([ds[k][0].numpy() for k in range(0, len(ds), 50)])
    assert all_x.min() >= 0.0 and all_x.max() <= 1.0
    assert "Digits" in repr(ds)


def test_dataset_transforms():
    seen = []

    def record(img):
        seen.append(img)
        return img

    ds = Digits(train=False, transform=transforms.Compose([transforms.Lambda(record), transforms.ToTensor(),
                                                           transforms.Normalize([0.5], [0.25])]),
                target_transform=lambda t: t + 100)
    x, y = ds[0]
    assert isinstance(seen[0], np.ndarray) and seen[0].shape == (8, 8) and seen[0].dtype == np.float32
    assert tuple(x.shape) == (1, 8, 8)
    plain = Digits(train=False)[0][0].numpy()
    np.testing.assert_allclose(x.numpy(), (plain - 0.5) / 0.25, atol=1e-6)
    assert y == int(Digits(train=False).targets[0]) + 100


def test_dataloader_batches():
    minidl.manual_seed(0)
    loader = DataLoader(Digits(train=True), batch_size=64, shuffle=True)
    batches = list(loader)
    assert len(batches) == 23
    x, y = batches[0]
    assert tuple(x.shape) == (64, 1, 8, 8) and x.dtype == minidl.float32
    assert tuple(y.shape) == (64,) and y.dtype == minidl.int64
    assert tuple(batches[-1][0].shape) == (1438 - 22 * 64, 1, 8, 8)
    assert sorted(int(v) for b in batches for v in b[1].tolist()) == sorted(Digits().targets.tolist())


def test_logistic_regression_learns_real_data():
    """A softmax regression on the train split beats 85% on the test split: the data and labels are real."""
    minidl.manual_seed(0)
    train, test = Digits(train=True), Digits(train=False)
    xtr = minidl.from_numpy(train.data.reshape(-1, 64).astype(np.float32) / 16)
    ytr = minidl.from_numpy(train.targets)
    xte = minidl.from_numpy(test.data.reshape(-1, 64).astype(np.float32) / 16)
    model = minidl.nn.Linear(64, 10)
    opt = minidl.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(100):
        loss = minidl.nn.functional.cross_entropy(model(xtr), ytr)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with minidl.no_grad():
        pred = model(xte).argmax(1).numpy()
    accuracy = float((pred == test.targets).mean())
    assert accuracy > 0.85, accuracy
