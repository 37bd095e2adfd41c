"""The dataset readers on small files that the tests write in each format (IDX raw and gzip, CIFAR's
pickled batches as Python 2 and 3 write them, MovieLens ratings, plain text): they return exactly what
was written, reject damaged or foreign input with errors that name the file, and feed a DataLoader."""
import gzip
import os
import pickle
import struct

import numpy as np
import pytest

import minidl
from minidl.utils.data import DataLoader
from minidl.vision import datasets, transforms
from minidl.vision.datasets import CIFAR10, MNIST, FashionMNIST, MovieLens, TextDataset, read_idx
from minidl.vision.image_readers import load_plain_pickle

RNG = np.random.default_rng(11)


# ---------------------------------------------------------------------- IDX
def idx_bytes(array, code=0x08):
    """The IDX format (LeCun's MNIST page), written with struct: 0, 0, type code, ndim, big-endian sizes."""
    big = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    return (struct.pack(">BBBB", 0, 0, code, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
            + array.astype(big).tobytes())


def write(path, data, gz=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def make_mnist(root, name="MNIST", train=True, n=5, gz=False, labels_gz=None):
    images = RNG.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = RNG.integers(0, 10, n, dtype=np.uint8)
    prefix = "train" if train else "t10k"
    raw = root / name / "raw"
    write(raw / f"{prefix}-images-idx3-ubyte", idx_bytes(images), gz)
    write(raw / f"{prefix}-labels-idx1-ubyte", idx_bytes(labels), gz if labels_gz is None else labels_gz)
    return images, labels


@pytest.mark.parametrize("cls", [MNIST, FashionMNIST])
@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("train", [True, False])
def test_mnist_reads_what_was_written(tmp_path, cls, gz, train):
    images, labels = make_mnist(tmp_path, cls.__name__, train, gz=gz)
    ds = cls(tmp_path, train=train)
    assert len(ds) == 5 and ds.train is train
    assert ds.data.dtype == minidl.uint8 and ds.targets.dtype == minidl.int64
    np.testing.assert_array_equal(ds.data.numpy(), images)
    np.testing.assert_array_equal(ds.targets.numpy(), labels)
    for i in range(5):
        image, target = ds[i]
        assert isinstance(target, int) and target == labels[i]
        assert isinstance(image, np.ndarray) and image.dtype == np.uint8
        np.testing.assert_array_equal(image, images[i])
    assert len(ds.classes) == 10 and ds.class_to_idx[ds.classes[3]] == 3
    assert ds.classes[0] == ("0 - zero" if cls is MNIST else "T-shirt/top")
    assert repr(ds).splitlines() == [f"Dataset {cls.__name__}", "    Number of datapoints: 5",
                                      f"    Root location: {tmp_path}", f"    Split: {'Train' if train else 'Test'}"]


def test_mnist_transforms_mixed_compression_and_dataloader(tmp_path):
    images, labels = make_mnist(tmp_path, n=7, gz=True, labels_gz=False)
    ds = MNIST(str(tmp_path), transform=transforms.ToTensor(), target_transform=lambda t: t + 100,
               download=True)  # the files are there: nothing to download, as in torchvision
    image, target = ds[2]
    assert image.shape == (1, 28, 28) and image.dtype == minidl.float32 and target == labels[2] + 100
    np.testing.assert_allclose(image.numpy()[0], images[2] / np.float32(255), rtol=1e-6)
    batches = list(DataLoader(ds, batch_size=3))
    assert [tuple(x.shape) for x, _ in batches] == [(3, 1, 28, 28), (3, 1, 28, 28), (1, 1, 28, 28)]
    np.testing.assert_allclose(np.concatenate([x.numpy() for x, _ in batches])[:, 0], images / np.float32(255),
                               rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate([y.numpy() for _, y in batches]), labels.astype(np.int64) + 100)


@pytest.mark.parametrize("code,values", [(0x0C, np.arange(-6, 6).reshape(3, 4) * 1000003),
                                         (0x0E, RNG.standard_normal((2, 3, 2))), (0x09, np.array([-128, 0, 127])),
                                         (0x0B, np.array([[-32768], [513]])), (0x0D, np.float32([1.5, -2.25]))])
@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_all_types(tmp_path, code, values, gz):
    """Big-endian values of every IDX type come back exactly, in native byte order."""
    path = write(tmp_path / "x.idx", idx_bytes(values, code), gz)
    got = read_idx(path)
    assert got.shape == values.shape and got.dtype.isnative
    np.testing.assert_array_equal(got, values)


def mnist_files(tmp_path):
    make_mnist(tmp_path)
    raw = tmp_path / "MNIST" / "raw"
    return raw / "train-images-idx3-ubyte", raw / "train-labels-idx1-ubyte"


@pytest.mark.parametrize("damage,match", [
    (lambda images, labels: images.write_bytes(images.read_bytes()[:-10]),
     r"train-images-idx3-ubyte: truncated: shape \(5, 28, 28\) of uint8 needs 3920 bytes .* found 3910"),
    (lambda images, labels: images.write_bytes(images.read_bytes() + b"\0"), "has trailing bytes"),
    (lambda images, labels: images.write_bytes(images.read_bytes()[:10]), "truncated header: 3 dimensions need 16"),
    (lambda images, labels: images.write_bytes(b"\0\0"), "too short for an IDX header"),
    (lambda images, labels: images.write_bytes(b"\x12\x34\x56\x78" + images.read_bytes()[4:]),
     "magic number 0x12345678 is not an IDX one"),
    (lambda images, labels: images.write_bytes(labels.read_bytes()),
     r"train-images-idx3-ubyte: an IDX file of 1-d uint8; expected images: 3-d unsigned bytes \(magic .* 0x00000803"),
    (lambda images, labels: labels.write_bytes(idx_bytes(np.zeros(5, np.int32), 0x0C)),
     r"train-labels-idx1-ubyte: an IDX file of 1-d int32; expected labels: 1-d unsigned bytes \(magic .* 0x00000801"),
    (lambda images, labels: labels.write_bytes(idx_bytes(np.zeros(4, np.uint8))),
     "holds 5 images but .* holds 4 labels"),
    (lambda images, labels: labels.write_bytes(idx_bytes(np.array([1, 2, 10, 3, 4], np.uint8))),
     r"train-labels-idx1-ubyte: label 10 out of range: expected 0..9"),
    (lambda images, labels: images.write_bytes(gzip.compress(images.read_bytes())[:-12]),
     "train-images-idx3-ubyte: damaged or truncated gzip data"),
])
def test_mnist_rejects_damaged_files(tmp_path, damage, match):
    damage(*mnist_files(tmp_path))
    with pytest.raises(ValueError, match=match):
        MNIST(tmp_path)


@pytest.mark.parametrize("download", [False, True])
def test_mnist_missing_files_say_where_to_put_them(tmp_path, download):
    with pytest.raises(FileNotFoundError) as info:
        FashionMNIST(tmp_path, download=download)
    message = str(info.value)
    raw = tmp_path / "FashionMNIST" / "raw"
    assert str(raw / "train-images-idx3-ubyte") in message and "train-images-idx3-ubyte.gz" in message
    assert "never downloads" in message and f"place train-images-idx3-ubyte in {raw}" in message
    make_mnist(tmp_path, "FashionMNIST", train=True)  # the test split's files are still missing
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte"):
        FashionMNIST(tmp_path, train=False)
    assert len(FashionMNIST(tmp_path, download=download)) == 5


# ---------------------------------------------------------------------- CIFAR-10
LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def py2_pickle(obj) -> bytes:
    """Protocol 2 as Python 2's cPickle writes CIFAR's batches: str as byte strings (SHORT_BINSTRING,
    BINSTRING), ints as BININT, numpy arrays through numpy.core.multiarray._reconstruct; no memo."""
    out = bytearray(b"\x80\x02")

    def string(s):
        out.extend((b"U" + bytes([len(s)]) if len(s) < 256 else b"T" + struct.pack("<i", len(s))) + s)

    def put(o):
        if isinstance(o, dict):
            out.extend(b"}(")
            for k, v in o.items():
                put(k)
                put(v)
            out.extend(b"u")
        elif isinstance(o, list):
            out.extend(b"](")
            for v in o:
                put(v)
            out.extend(b"e")
        elif isinstance(o, str):
            string(o.encode("latin-1"))
        elif isinstance(o, int):
            out.extend(b"J" + struct.pack("<i", o))
        else:  # ndarray: _reconstruct(ndarray, (0,), 'b') then BUILD (1, shape, dtype, False, bytes)
            out.extend(b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85")
            string(b"b")
            out.extend(b"\x87R(K\x01(" + b"".join(b"J" + struct.pack("<i", d) for d in o.shape) + b"t")
            out.extend(b"cnumpy\ndtype\n")
            string(o.dtype.str[1:].encode())
            out.extend(b"K\x00K\x01\x87R(K\x03")
            string(o.dtype.str[:1].encode())
            out.extend(b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89")
            string(o.tobytes())
            out.extend(b"tb")

    put(obj)
    return bytes(out + b".")


def dump(obj, fmt):
    if fmt == "py2":
        return py2_pickle(obj)
    if fmt == "bytes-keys":
        obj = {k.encode(): v for k, v in obj.items()}
        fmt = 4
    return pickle.dumps(obj, protocol=fmt)


def make_cifar(root, fmt=4, n=3):
    """Six batches of n images each and batches.meta; returns {name: (images as rows, labels)}."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    written = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        rows = RNG.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = [int(v) for v in RNG.integers(0, 10, n)]
        batch = {"batch_label": f"{name} of 6", "labels": labels, "data": rows,
                 "filenames": [f"img_{i}.png" for i in range(n)]}
        (folder / name).write_bytes(dump(batch, fmt))
        written[name] = rows, labels
    meta = {"num_cases_per_batch": n, "label_names": LABEL_NAMES, "num_vis": 3072}
    (folder / "batches.meta").write_bytes(dump(meta, fmt))
    return written


def test_py2_pickle_helper_is_what_numpy_reads():
    """The hand-written Python 2 pickle is right: numpy's own unpickling gives the object back."""
    rows = RNG.integers(0, 256, (2, 300), dtype=np.uint8)
    back = pickle.loads(py2_pickle({"data": rows, "labels": [3, 70000], "x": "é" * 300}), encoding="latin1")
    assert back["labels"] == [3, 70000] and back["x"] == "é" * 300
    np.testing.assert_array_equal(back["data"], rows)


@pytest.mark.parametrize("fmt", ["py2", 2, 4, 5])
def test_plain_pickle_arrays_keep_values_dtype_and_layout(tmp_path, fmt):
    arrays = {"big": np.arange(-3, 3, dtype=">i4").reshape(2, 3), "f8": RNG.standard_normal(4),
              "bool": np.array([True, False]), "u2": np.array([[1, 65535]], "<u2"), "empty": np.zeros((0, 5), "f4")}
    if fmt != "py2":  # the helper writes C order only
        arrays["fortran"] = np.asfortranarray(RNG.standard_normal((3, 2)))
    path = tmp_path / "arrays.pkl"
    path.write_bytes(dump(arrays, fmt))
    got = load_plain_pickle(path)
    assert set(got) == set(arrays)
    for key, want in arrays.items():
        assert got[key].dtype == want.dtype and got[key].shape == want.shape, key
        np.testing.assert_array_equal(got[key], want)


@pytest.mark.parametrize("fmt", ["py2", 2, 4, 5, "bytes-keys"])
@pytest.mark.parametrize("train", [True, False])
def test_cifar10_reads_what_was_written(tmp_path, fmt, train):
    written = make_cifar(tmp_path, fmt)
    names = [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]
    rows = np.concatenate([written[n][0] for n in names])
    labels = sum((written[n][1] for n in names), [])
    ds = CIFAR10(tmp_path, train=train)
    assert ds.classes == LABEL_NAMES and ds.class_to_idx["cat"] == 3
    assert isinstance(ds.data, np.ndarray) and ds.data.dtype == np.uint8 and ds.data.shape == (len(rows), 32, 32, 3)
    assert ds.targets == labels and all(type(t) is int for t in ds.targets)
    # a row is the R plane, then G, then B, each 32x32 row-major: pixel (y, x) channel c is row[c*1024 + y*32 + x]
    for i, row in enumerate(rows):
        image, target = ds[i]
        assert target == labels[i] and image.shape == (32, 32, 3)
        for c, y, x in [(0, 0, 0), (1, 5, 31), (2, 31, 7), (0, 17, 3)]:
            assert image[y, x, c] == row[c * 1024 + y * 32 + x]
        np.testing.assert_array_equal(image, row.reshape(3, 32, 32).transpose(1, 2, 0))


def test_cifar10_transforms_and_dataloader(tmp_path):
    written = make_cifar(tmp_path, n=2)
    ds = CIFAR10(tmp_path, train=False, transform=transforms.ToTensor())
    loader = DataLoader(ds, batch_size=2)
    (x, y), = list(loader)
    assert x.shape == (2, 3, 32, 32) and x.dtype == minidl.float32 and y.dtype == minidl.int64
    rows, labels = written["test_batch"]
    np.testing.assert_allclose(x.numpy(), rows.reshape(2, 3, 32, 32) / np.float32(255), rtol=1e-6)
    assert y.numpy().tolist() == labels


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("payload,match", [
    (lambda tmp: {"data": RunsCode(tmp / "pwned"), "labels": []}, r"refusing to load (posix|nt)\.system"),
    (lambda tmp: {"data": np.array([1, "a"], dtype=object), "labels": [0, 1]},
     "dtype 'O8' is not a plain numeric dtype"),
    (lambda tmp: {"data": np.zeros(2, dtype=[("a", "u1")]), "labels": [0, 1]}, "structured dtypes are not read"),
    (lambda tmp: {"data": np.zeros((1, 3072), np.uint8), "labels": [0], "x": pickle.PickleBuffer},
     "refusing to load pickle.PickleBuffer"),
])
def test_cifar10_refuses_pickles_that_are_not_plain_data(tmp_path, payload, match):
    make_cifar(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    batch.write_bytes(pickle.dumps(payload(tmp_path), protocol=4))
    with pytest.raises(ValueError, match=match) as info:
        CIFAR10(tmp_path)
    assert str(batch) in str(info.value) and "not a pickle of plain data" in str(info.value)
    assert not (tmp_path / "pwned").exists()


def cifar_batch(tmp_path, name="data_batch_3"):
    make_cifar(tmp_path)
    return tmp_path / "cifar-10-batches-py" / name


@pytest.mark.parametrize("content,match", [
    ({"data": np.zeros((3, 3000), np.uint8), "labels": [0, 1, 2]}, r"expected uint8 of shape \(N, 3072\)"),
    ({"data": np.zeros((3, 3072), np.int16), "labels": [0, 1, 2]}, r"'data' is int16 of shape \(3, 3072\)"),
    ({"data": np.zeros((3, 3072), np.uint8), "labels": [0, 1]}, "'labels' must be 3 ints in 0..9"),
    ({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}, "'labels' must be 2 ints in 0..9"),
    ({"data": np.zeros((2, 3072), np.uint8), "fine_labels": [0, 1]}, r"expected a dict with 'labels' \(list\)"),
    ([1, 2, 3], r"expected a dict with 'data' \(ndarray\); found list"),
])
def test_cifar10_rejects_unexpected_batches(tmp_path, content, match):
    batch = cifar_batch(tmp_path)
    batch.write_bytes(pickle.dumps(content))
    with pytest.raises(ValueError, match=match) as info:
        CIFAR10(tmp_path)
    assert str(batch) in str(info.value)


def test_cifar10_damaged_and_missing_files(tmp_path):
    batch = cifar_batch(tmp_path)
    batch.write_bytes(batch.read_bytes()[:-500])
    with pytest.raises(ValueError, match="data_batch_3: not a pickle of plain data"):
        CIFAR10(tmp_path)
    batch.unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3 not found. minidl never downloads"):
        CIFAR10(tmp_path, download=True)
    assert len(CIFAR10(tmp_path, train=False)) == 3
    (tmp_path / "cifar-10-batches-py" / "batches.meta").write_bytes(pickle.dumps({"names": LABEL_NAMES}))
    with pytest.raises(ValueError, match=r"batches.meta: expected a dict with 'label_names' \(list\); found \['names"):
        CIFAR10(tmp_path, train=False)


# ---------------------------------------------------------------------- MovieLens
RATINGS = [(10, 100, 5, 881250949), (3, 5, 3, 891717742), (7, 100, 4, 878887116), (3, 42, 1, 880606923),
           (196, 5, 2, 886397596)]


def write_ratings(root, version, rows=RATINGS, extra=""):
    name, sep = {"ml-100k": ("u.data", "\t"), "ml-1m": ("ratings.dat", "::"),
                 "ml-latest-small": ("ratings.csv", ",")}[version]
    path = root / version / name
    path.parent.mkdir(parents=True)
    header = "userId,movieId,rating,timestamp\n" if version == "ml-latest-small" else ""
    path.write_text(header + "".join(sep.join(str(v) for v in row) + "\n" for row in rows) + extra)
    return path


@pytest.mark.parametrize("version", ["ml-100k", "ml-1m", "ml-latest-small"])
def test_movielens_remaps_ids(tmp_path, version):
    write_ratings(tmp_path, version, extra="\n")  # a trailing blank line is fine
    ds = MovieLens(tmp_path, version=version)
    assert len(ds) == 5 and ds.num_users == 4 and ds.num_items == 3
    # new ids follow the order of the original ones
    assert ds.user_ids.tolist() == [3, 7, 10, 196] and ds.item_ids.tolist() == [5, 42, 100]
    assert ds.user_index == {3: 0, 7: 1, 10: 2, 196: 3} and ds.item_index == {5: 0, 42: 1, 100: 2}
    assert ds.users.tolist() == [2, 0, 1, 0, 3] and ds.items.tolist() == [2, 0, 2, 1, 0]
    assert ds.users.dtype == np.int64 and ds.ratings.dtype == np.float32
    assert ds.ratings.tolist() == [5, 3, 4, 1, 2] and ds.timestamps.tolist() == [r[3] for r in RATINGS]
    for (user, item, rating, _), sample in zip(RATINGS, ds):
        assert ds.user_ids[sample[0]] == user and ds.item_ids[sample[1]] == item and sample[2] == rating
        assert type(sample[0]) is int and type(sample[1]) is int and sample[2].dtype == np.float32
    users, items, ratings = next(iter(DataLoader(ds, batch_size=4)))
    assert users.dtype == minidl.int64 and ratings.dtype == minidl.float32
    assert users.numpy().tolist() == [2, 0, 1, 0] and items.numpy().tolist() == [2, 0, 2, 1]
    assert ratings.numpy().tolist() == [5, 3, 4, 1]


def test_movielens_root_may_be_the_version_folder(tmp_path):
    path = write_ratings(tmp_path, "ml-1m")
    ds = MovieLens(tmp_path / "ml-1m", "ml-1m")
    assert ds.path == path and ds.ratings.tolist() == [5, 3, 4, 1, 2]


@pytest.mark.parametrize("version,bad", [("ml-100k", "1\t2\t3"), ("ml-100k", "a\t2\t3\t4"),
                                         ("ml-100k", "1\t2\tfive\t4"), ("ml-100k", "1::2::3::4"),
                                         ("ml-1m", "1::2::3::4::5"), ("ml-1m", "1\t2\t3\t4"),
                                         ("ml-1m", "1::2::3::4.5"), ("ml-latest-small", "1,2,3.5"),
                                         ("ml-latest-small", "userId,movieId,rating,timestamp")])
def test_movielens_malformed_line_names_file_and_line(tmp_path, version, bad):
    path = write_ratings(tmp_path, version, RATINGS[:2], extra=bad + "\n")
    line = 4 if version == "ml-latest-small" else 3   # (after the csv's header)
    with pytest.raises(ValueError, match=f"line {line}: expected user") as info:
        MovieLens(tmp_path, version)
    assert str(path) in str(info.value) and repr(bad) in str(info.value)


@pytest.mark.parametrize("version", ["ml-100k", "ml-1m", "ml-latest-small"])
def test_written_movielens_reads_back_with_latent_structure(tmp_path, version):
    """The generator's file reads back in its version's format, and its ratings follow the users'
    and items' latent factors: a rank-4 fit of the rating matrix explains far more of it than of
    the same ratings shuffled."""
    path = minidl.vision.datasets.write_movielens(tmp_path, version, users=60, items=50, per_user=40, seed=1)
    ds = MovieLens(tmp_path, version)
    assert path.name == MovieLens.versions[version][0] and len(ds) == 60 * 40
    assert ds.num_users == 60 and ds.num_items <= 50 and set(ds.ratings.tolist()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    def explained_by_rank_4(ratings):
        grid = np.full((60, ds.num_items), np.nan)
        grid[ds.users, ds.items] = ratings
        filled = np.where(np.isnan(grid), np.nanmean(grid), grid) - np.nanmean(grid)
        s = np.linalg.svd(filled, compute_uv=False)
        return (s[:4] ** 2).sum() / (s ** 2).sum()
    shuffled = np.random.RandomState(0).permutation(ds.ratings)   # (the same ratings, no structure)
    assert explained_by_rank_4(ds.ratings) > 2 * explained_by_rank_4(shuffled)
    with pytest.raises(ValueError, match="per_user=60 must be in 1..items"):
        minidl.vision.datasets.write_movielens(tmp_path, version, items=50, per_user=60)


def test_movielens_missing_empty_and_unknown_version(tmp_path):
    with pytest.raises(FileNotFoundError, match="u.data not found"):
        MovieLens(tmp_path)
    write_ratings(tmp_path, "ml-1m", rows=[], extra="\n\n")
    with pytest.raises(ValueError, match="ratings.dat: no ratings"):
        MovieLens(tmp_path, "ml-1m")
    with pytest.raises(ValueError, match="version must be one of"):
        MovieLens(tmp_path, "ml-20m")


# ---------------------------------------------------------------------- text
TEXT = "hello world\nthe world says hello\n"


def test_char_dataset_samples_and_vocab(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT)
    ds = TextDataset(path, block_size=8)
    assert ds.itos == sorted(set(TEXT)) and ds.vocab_size == len(set(TEXT))
    assert ds.stoi == {c: i for i, c in enumerate(sorted(set(TEXT)))}
    assert ds.decode(ds.data) == TEXT and ds.encode("hello") == [ds.stoi[c] for c in "hello"]
    assert len(ds) == len(TEXT) - 8
    for i in (0, 5, len(ds) - 1, -1):
        x, y = ds[i]
        j = i % len(ds)
        assert x.dtype == minidl.int64 and x.shape == (8,) and y.shape == (8,)
        assert ds.decode(x) == TEXT[j:j + 8] and ds.decode(y) == TEXT[j + 1:j + 9]
    with pytest.raises(IndexError):
        ds[len(ds)]
    x, y = ds[3]
    x[:] = 0  # samples are copies: neither the target nor the dataset changes
    assert ds.decode(y) == TEXT[4:12] and ds.decode(ds[3][0]) == TEXT[3:11]
    with pytest.raises(ValueError, match="'Z' is not in the vocabulary"):
        ds.encode("heZlo")


def test_word_dataset(tmp_path):
    path = tmp_path / "words.txt"
    path.write_text(TEXT)
    ds = TextDataset(path, block_size=2, level="word")
    words = TEXT.split()
    assert ds.itos == sorted(set(words)) and len(ds) == len(words) - 2
    x, y = ds[1]
    assert ds.decode(x) == "world the" and ds.decode(y) == "the world"
    assert ds.decode(ds.encode("says hello  world\n")) == "says hello world"
    assert ds.decode(ds.data) == " ".join(words)


def test_text_dataset_shared_vocab_and_dataloader(tmp_path):
    train, val = tmp_path / "train.txt", tmp_path / "val.txt"
    train.write_text(TEXT)
    val.write_text("hello there\n")
    ds = TextDataset(train, block_size=4)
    ds_val = TextDataset(val, block_size=4, vocab=ds.itos)
    assert ds_val.stoi == ds.stoi and ds_val.decode(ds_val.data) == "hello there\n"
    xs, ys = zip(*(batch for batch in DataLoader(ds, batch_size=5)))
    x, y = np.concatenate([t.numpy() for t in xs]), np.concatenate([t.numpy() for t in ys])
    assert x.shape == (len(ds), 4) and xs[0].dtype == minidl.int64
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    np.testing.assert_array_equal(x[:, 0], ds.data[:len(ds)])


@pytest.mark.parametrize("level,text,match", [
    ("char", "hello\nworld\nbye Q\n", r"line 3: 'Q' is not in the vocabulary"),
    ("word", "hello world\n\nthe hellos\n", r"line 3: 'hellos' is not in the vocabulary"),
])
def test_text_dataset_unknown_token_names_its_line(tmp_path, level, text, match):
    path = tmp_path / "val.txt"
    path.write_text(text)
    vocab = sorted(set("hello\nworld\nbye ")) if level == "char" else ["hello", "the", "world"]
    with pytest.raises(ValueError, match=match) as info:
        TextDataset(path, block_size=2, level=level, vocab=vocab)
    assert str(path) in str(info.value)


def test_text_dataset_errors(tmp_path):
    path = tmp_path / "t.txt"
    with pytest.raises(FileNotFoundError, match="t.txt not found"):
        TextDataset(path, block_size=4)
    path.write_bytes("line one\nline two\nbad \xff byte\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"t.txt, line 3, column 5: byte 0xff is not utf-8 text"):
        TextDataset(path, block_size=4)
    path.write_text("abcd")
    with pytest.raises(ValueError, match="4 char tokens; a sample of block_size 4 needs at least 5"):
        TextDataset(path, block_size=4)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        TextDataset(path, block_size=0)
    with pytest.raises(ValueError, match="level must be"):
        TextDataset(path, block_size=2, level="byte")
    assert len(TextDataset(path, block_size=3)) == 1


def test_readers_exported_like_torchvision():
    for name in ("MNIST", "FashionMNIST", "CIFAR10", "VisionDataset"):
        assert name in datasets.__all__ and getattr(datasets, name).__module__ == "minidl.vision.image_readers"


def test_readers_pickle_for_worker_processes(tmp_path):
    """DataLoader workers started by spawn receive the dataset pickled."""
    make_mnist(tmp_path)
    make_cifar(tmp_path)
    write_ratings(tmp_path, "ml-1m")
    (tmp_path / "t.txt").write_text(TEXT)
    for ds in (MNIST(tmp_path), CIFAR10(tmp_path), MovieLens(tmp_path, "ml-1m"), TextDataset(tmp_path / "t.txt", 3)):
        copy = pickle.loads(pickle.dumps(ds))
        for got, want in zip(copy[2], ds[2]):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
