"""Datasets from text files: MovieLens ratings (for recommenders) and a character- or word-level corpus cut
into next-token samples (for language models such as a small GPT).

Errors name the file, the line and what was expected.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import minidl

from ..utils.data import Dataset
from .image_readers import _missing


__all__ = ["MovieLens", "TextDataset", "write_movielens"]


def _read_text(path: Path, encoding: str) -> str:
    if not path.is_file():
        raise _missing(path)
    raw = path.read_bytes()
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ValueError(f"{path}, line {line}, column {column}: byte 0x{raw[e.start]:02x} is not {encoding} "
                         f"text") from None


class MovieLens(Dataset):
    """MovieLens ratings as ``(user, item, rating)`` samples, users and items renumbered 0..n-1.

    ``root`` holds the extracted archive: ``root/ml-100k/u.data``
    (``user<TAB>item<TAB>rating<TAB>timestamp``) for ``version="ml-100k"``,
    ``root/ml-1m/ratings.dat`` (``user::item::rating::timestamp``) for ``"ml-1m"``,
    ``root/ml-latest-small/ratings.csv`` (a ``userId,movieId,rating,timestamp`` header, then
    comma-separated rows) for ``"ml-latest-small"``; ``root`` may also be that version's folder
    itself (``root/u.data``). ``write_movielens`` makes such a file. The new ids follow the order of
    the original ones: ``user_ids[u]`` is new user ``u``'s original id and ``user_index[original] ==
    u`` (likewise ``item_ids``, ``item_index``). ``users``, ``items`` (int64), ``ratings`` (float32)
    and ``timestamps`` (int64) hold the file's rows in order; a sample's rating is a float32 scalar,
    so that a DataLoader batches it into a float32 tensor.
    """

    versions = {"ml-100k": ("u.data", "\t"), "ml-1m": ("ratings.dat", "::"), "ml-latest-small": ("ratings.csv", ",")}
    HEADER = "userId,movieId,rating,timestamp"   # (ml-latest-small's first line)

    def __init__(self, root, version: str = "ml-100k", transform=None):
        if version not in self.versions:
            raise ValueError(f"version must be one of {sorted(self.versions)}, got {version!r}")
        self.root, self.version, self.transform = root, version, transform
        name, sep = self.versions[version]
        self.path = Path(root) / version / name
        if not self.path.exists() and (Path(root) / name).exists():   # (root is the version's folder)
            self.path = Path(root) / name
        rows = self._parse(self.path, sep)
        users, items = rows[:, 0].astype(np.int64), rows[:, 1].astype(np.int64)
        self.user_ids, self.users = np.unique(users, return_inverse=True)
        self.item_ids, self.items = np.unique(items, return_inverse=True)
        self.users, self.items = self.users.astype(np.int64), self.items.astype(np.int64)
        self.user_index = {int(u): i for i, u in enumerate(self.user_ids)}
        self.item_index = {int(m): i for i, m in enumerate(self.item_ids)}
        self.ratings = rows[:, 2].astype(np.float32)
        self.timestamps = rows[:, 3].astype(np.int64)

    @staticmethod
    def _parse(path: Path, sep: str) -> np.ndarray:
        """(n, 4) float64 rows: user, item, rating, timestamp (ids and timestamps checked to be integers)."""
        rows = []
        for number, line in enumerate(_read_text(path, "latin-1").splitlines(), 1):
            if not line.strip() or (number == 1 and line.strip() == MovieLens.HEADER):
                continue
            fields = line.split(sep)
            try:
                if len(fields) != 4:
                    raise ValueError
                user, item, timestamp = int(fields[0]), int(fields[1]), int(fields[3])
                rating = float(fields[2])
            except ValueError:
                raise ValueError(f"{path}, line {number}: expected user{sep}item{sep}rating{sep}timestamp "
                                 f"(integer ids and timestamp, a numeric rating), got {line!r}") from None
            rows.append((user, item, rating, timestamp))
        if not rows:
            raise ValueError(f"{path}: no ratings in the file")
        return np.array(rows, dtype=np.float64)

    @property
    def num_users(self) -> int:
        return len(self.user_ids)

    @property
    def num_items(self) -> int:
        return len(self.item_ids)

    def __len__(self) -> int:
        return len(self.ratings)

    def __getitem__(self, index: int):
        sample = int(self.users[index]), int(self.items[index]), self.ratings[index]
        return self.transform(sample) if self.transform is not None else sample

    def __repr__(self) -> str:
        return (f"Dataset MovieLens ({self.version})\n    Number of datapoints: {len(self)}\n"
                f"    Users: {self.num_users}, items: {self.num_items}\n    Root location: {self.root}")


def write_movielens(root, version: str = "ml-100k", users: int = 200, items: int = 300, per_user: int = 30,
                    factors: int = 4, seed: int = 0):
    """Write ``root/<version>/<ratings file>`` in that version's format: ``per_user`` ratings of
    distinct items per user, from latent factors (a user likes the items whose factors align
    with hers), so that a recommender has structure to learn in both what a user rates and how:
    she rates items drawn with probability growing with exp(u . v) (the Gumbel top-k draw, without
    replacement), and rates each 1..5 by the quantile of u . v + noise; each user's timestamps put
    her ratings in a random order. For tests, and for users without the real data. Returns the file's path."""
    if version not in MovieLens.versions:
        raise ValueError(f"version must be one of {sorted(MovieLens.versions)}, got {version!r}")
    if not 0 < per_user <= items:
        raise ValueError(f"write_movielens: per_user={per_user} must be in 1..items ({items})")
    rs = np.random.RandomState(seed)
    u, v = rs.randn(users, factors), rs.randn(items, factors)
    rows = []
    for user in range(users):
        chosen = np.argsort(-(u[user] @ v.T + rs.gumbel(size=items)), kind="stable")[:per_user]
        times = rs.permutation(per_user)   # (rated in a random order: the latest is not the least liked)
        rows += [(user, item, score, t) for t, item, score in
                 zip(times, chosen, u[user] @ v[chosen].T + 0.5 * rs.randn(per_user))]
    scores = np.array([r[2] for r in rows])
    stars = 1 + np.searchsorted(np.quantile(scores, [0.1, 0.25, 0.5, 0.75]), scores)   # 1..5
    name, sep = MovieLens.versions[version]
    path = Path(root) / version / name
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [MovieLens.HEADER] if version == "ml-latest-small" else []
    lines += [sep.join(map(str, (user + 1, item + 1, star, 874965758 + 60 * t)))
              for (user, item, _, t), star in zip(rows, stars)]
    path.write_text("\n".join(lines) + "\n", encoding="latin-1")
    return path


class TextDataset(Dataset):
    """A text file as next-token samples: ``(x, y)`` int64 tensors of ``block_size`` token ids, ``y`` the
    tokens one position after ``x`` (what a character-level GPT trains on).

    ``level="char"``: every character is a token; ``"word"``: runs of non-space characters are (so
    ``decode`` joins words with single spaces). The vocabulary is the sorted set of the text's tokens,
    or ``vocab`` when given (a validation file then shares the training file's ids, and a token outside
    it is an error naming its line). ``stoi`` maps tokens to ids, ``itos`` ids to tokens, ``data`` holds
    the whole text's ids.
    """

    def __init__(self, path, block_size: int, level: str = "char", vocab=None, encoding: str = "utf-8"):
        if level not in ("char", "word"):
            raise ValueError(f"level must be 'char' or 'word', got {level!r}")
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        self.path, self.block_size, self.level = Path(path), block_size, level
        text = _read_text(self.path, encoding)
        tokens = self._tokenize(text)
        self.itos = sorted(set(tokens)) if vocab is None else list(vocab)
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("vocab has repeated tokens")
        unknown = next((t for t in tokens if t not in self.stoi), None)
        if unknown is not None:
            where = text.index(unknown) if level == "char" else re.search(
                r"(?<!\S)" + re.escape(unknown) + r"(?!\S)", text).start()
            raise ValueError(f"{self.path}, line {text.count(chr(10), 0, where) + 1}: {unknown!r} is not in the "
                             f"vocabulary")
        if len(tokens) <= block_size:
            raise ValueError(f"{self.path}: {len(tokens)} {level} tokens; a sample of block_size {block_size} "
                             f"needs at least {block_size + 1}")
        self.data = np.array([self.stoi[t] for t in tokens], dtype=np.int64)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def _tokenize(self, text: str) -> list[str]:
        return list(text) if self.level == "char" else text.split()

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[t] for t in self._tokenize(text)]
        except KeyError as e:
            raise ValueError(f"{e.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids) -> str:
        """Ids (a list, numpy array or tensor) back to text."""
        ids = np.asarray(ids.numpy() if hasattr(ids, "numpy") else ids).reshape(-1)
        return ("" if self.level == "char" else " ").join(self.itos[int(i)] for i in ids)

    def __len__(self) -> int:
        return len(self.data) - self.block_size

    def __getitem__(self, index: int):
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} samples")
        index %= len(self)
        x = self.data[index:index + self.block_size].copy()
        y = self.data[index + 1:index + self.block_size + 1].copy()
        return minidl.from_numpy(x), minidl.from_numpy(y)

    def __repr__(self) -> str:
        return (f"Dataset TextDataset ({self.level} level)\n    Number of datapoints: {len(self)}\n"
                f"    Vocabulary: {self.vocab_size} tokens, block_size {self.block_size}\n"
                f"    File: {self.path}")
