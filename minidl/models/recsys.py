"""Two recommenders (as examples/ncf_ps.py and examples/wide_deep_ps.py train them); their embedding tables
are sparse (``sparse=True``), so that a step touches, and the parameter server moves, only the rows a batch
looks up."""
import minidl
from minidl import nn


def mlp(widths):
    """Linear layers of the given widths, a ReLU after each."""
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers)


class NeuMF(nn.Module):
    """NCF's NeuMF (He et al., 2017): GMF (the element-wise product of a user's and an item's
    factors) beside an MLP over their concatenated embeddings (its own, wider ones); a last linear
    layer over both gives the interaction's logit."""

    def __init__(self, num_users, num_items, factors=8, layers=(64, 32, 16, 8), sparse=True):
        super().__init__()
        self.gmf_user = nn.Embedding(num_users, factors, sparse=sparse)
        self.gmf_item = nn.Embedding(num_items, factors, sparse=sparse)
        self.mlp_user = nn.Embedding(num_users, layers[0] // 2, sparse=sparse)
        self.mlp_item = nn.Embedding(num_items, layers[0] // 2, sparse=sparse)
        self.mlp = mlp(layers)
        self.predict = nn.Linear(factors + layers[-1], 1)
        for table in (self.gmf_user, self.gmf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(table.weight, std=0.01)   # (the paper's initialisation)

    def forward(self, users, items):
        gmf = self.gmf_user(users) * self.gmf_item(items)
        deep = self.mlp(minidl.cat([self.mlp_user(users), self.mlp_item(items)], 1))
        return self.predict(minidl.cat([gmf, deep], 1)).squeeze(1)


class WideDeep(nn.Module):
    """Wide & Deep (Cheng et al., 2016) over a user and an item. The wide part is a linear model of
    sparse binary features: the user, the item, and their cross (the pair, hashed into
    ``cross_buckets``), each a row of weights in one table (a 1-wide embedding, summed). The deep
    part is an MLP over the user's and the item's ``dim``-wide embeddings (one table of
    users + items rows). The logit is the sum of both; they train jointly."""

    def __init__(self, num_users, num_items, cross_buckets=1 << 18, dim=16, hidden=(64, 32), sparse=True):
        super().__init__()
        self.num_users, self.features, self.cross_buckets = num_users, num_users + num_items, cross_buckets
        self.wide = nn.Embedding(self.features + cross_buckets, 1, sparse=sparse)
        self.deep = nn.Embedding(self.features, dim, sparse=sparse)
        self.mlp = nn.Sequential(mlp((2 * dim,) + tuple(hidden)), nn.Linear(hidden[-1], 1))
        nn.init.zeros_(self.wide.weight)
        nn.init.normal_(self.deep.weight, std=0.01)

    def forward(self, users, items):
        pair = self.features + (users * 1_000_003 + items) % self.cross_buckets   # (the crossed feature)
        wide = self.wide(minidl.stack([users, self.num_users + items, pair], 1)).sum((1, 2))
        deep = self.mlp(self.deep(minidl.stack([users, self.num_users + items], 1)).flatten(1)).squeeze(1)
        return wide + deep
