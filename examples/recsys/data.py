"""MovieLens ratings for the two recommenders: read (or generated), then split as the papers do.

NCF (He et al., 2017): every rating is an interaction; each user's latest one is held out, ranked
against 99 items the user never rated; training pairs each interaction with 4 items the user has no
training interaction with, drawn afresh every epoch (the held-out item among them, as in the paper:
training must not know which item is held out). Wide&Deep (Cheng et al., 2016), as click prediction:
a rating >= 4 is a click, and a seeded 80/20 split of the ratings gives the held-out set.
"""
import tempfile
from pathlib import Path

import numpy as np

from minidl.vision.datasets import MovieLens, write_movielens

NEGATIVES = 4   # NCF's training items the user has no interaction with, per interaction (the paper's)
FILES = {name: version for version, (name, _) in MovieLens.versions.items()}   # u.data -> ml-100k, ...


def load(path=None, users=600, items=400, per_user=40, seed=0) -> MovieLens:
    """The ratings at ``path`` (a ratings file, or the folder holding one: u.data, ratings.dat or
    ratings.csv), or, with no path, generated ratings with latent-factor structure (written in
    ml-latest-small's file format, which is all they share with it)."""
    if path is None:
        with tempfile.TemporaryDirectory(prefix="minidl-movielens-") as root:   # (read whole, then removed)
            write_movielens(root, "ml-latest-small", users=users, items=items, per_user=per_user, seed=seed)
            return MovieLens(root, "ml-latest-small")
    path = Path(path)
    folder = path.parent if path.is_file() else path
    found = [name for name in FILES if (folder / name).exists() and (path.is_dir() or path.name == name)]
    if not found:
        raise FileNotFoundError(f"--data {path}: expected a MovieLens ratings file ({', '.join(FILES)}) or a folder "
                                f"holding one")
    return MovieLens(folder, FILES[found[0]])


def leave_one_out(ds: MovieLens):
    """(train users, train items, test items): each user's latest rating (the last in the file
    among equal timestamps) is the test item; the others train."""
    order = np.lexsort((np.arange(len(ds)), ds.timestamps, ds.users))   # by user, then time, then file order
    last = np.r_[ds.users[order][1:] != ds.users[order][:-1], True]
    test = np.empty(ds.num_users, dtype=np.int64)
    test[ds.users[order][last]] = ds.items[order][last]
    keep = order[~last]
    return ds.users[keep], ds.items[keep], test


def rated_matrix(ds: MovieLens, users=None, items=None) -> np.ndarray:
    """rated[u, i]: user u rated item i (anywhere in the file, or among the given pairs)."""
    rated = np.zeros((ds.num_users, ds.num_items), dtype=bool)
    rated[ds.users if users is None else users, ds.items if items is None else items] = True
    return rated


def sample_unrated(rated: np.ndarray, users: np.ndarray, rs: np.random.RandomState) -> np.ndarray:
    """For each entry of ``users``, an item that user never rated, uniformly (by rejection)."""
    items = rs.randint(0, rated.shape[1], size=len(users))
    redo = np.flatnonzero(rated[users, items])
    while len(redo):
        items[redo] = rs.randint(0, rated.shape[1], size=len(redo))
        redo = redo[rated[users[redo], items[redo]]]
    return items


def ranking_candidates(rated: np.ndarray, test: np.ndarray, negatives=99, seed=0) -> np.ndarray:
    """(users, 1 + negatives) items: column 0 each user's held-out item, then ``negatives``
    distinct items the user never rated."""
    rs = np.random.RandomState(seed)
    out = np.empty((len(test), 1 + negatives), dtype=np.int64)
    out[:, 0] = test
    for user in range(len(test)):
        unrated = np.flatnonzero(~rated[user])
        if len(unrated) < negatives:
            raise ValueError(f"user {user} rated all but {len(unrated)} items; {negatives} unrated ones are needed")
        out[user, 1:] = rs.choice(unrated, negatives, replace=False)
    return out


def ncf_epoch(train_users, train_items, rated, epoch, seed=0, negatives=NEGATIVES):
    """One epoch's (users, items, labels): every training interaction (label 1) and, for each,
    ``negatives`` items not ``rated`` (the training interactions' matrix) (label 0), shuffled; the
    same on every rank for the same epoch."""
    rs = np.random.RandomState([seed, epoch])
    neg_users = np.repeat(train_users, negatives)
    users = np.concatenate([train_users, neg_users])
    items = np.concatenate([train_items, sample_unrated(rated, neg_users, rs)])
    labels = np.concatenate([np.ones(len(train_users)), np.zeros(len(neg_users))]).astype(np.float32)
    order = rs.permutation(len(users))
    return users[order], items[order], labels[order]


def click_split(ds: MovieLens, test_fraction=0.2, seed=0):
    """(train, test): each a (users, items, clicks) triple, clicks = rating >= 4 (float32 0/1)."""
    rs = np.random.RandomState(seed)
    order = rs.permutation(len(ds))
    cut = len(ds) - int(round(test_fraction * len(ds)))
    clicks = (ds.ratings >= 4).astype(np.float32)
    return [(ds.users[part], ds.items[part], clicks[part]) for part in (order[:cut], order[cut:])]


def shuffled(arrays, epoch, seed=0):
    rs = np.random.RandomState([seed, epoch])
    order = rs.permutation(len(arrays[0]))
    return [a[order] for a in arrays]
