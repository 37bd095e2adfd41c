"""NCF's NeuMF on MovieLens ratings through minidl's parameter server (or in one process).

    python examples/ncf_ps.py --servers 0                           # one process, generated ratings
    mpiexec -n 4 python examples/ncf_ps.py --servers 1 --consistency ssp --staleness 2 [--mode hybrid]
    mpiexec -n 4 python examples/ncf_ps.py --servers 1 --data ~/data/ml-1m   # the real ml-1m

As in He et al. (2017): every rating is an interaction; each user's latest one is held out and
ranked against 99 items the user never rated (HR@10, NDCG@10); training pairs each interaction
with 4 items the user has no training interaction with, drawn afresh every epoch, under binary
cross-entropy, with Adam. Without
--data the ratings are generated (minidl.vision.datasets.write_movielens: latent-factor structure).
Options and the distributed setup: examples/recsys/runner.py.
"""
from minidl.models import NeuMF
from minidl.models.metrics import hit_ratio_and_ndcg

from recsys import data, runner


class NCF:
    name = "ncf"

    def __init__(self, ratings, args):
        self.ratings, self.args = ratings, args
        self.train_users, self.train_items, test = data.leave_one_out(ratings)
        if not len(self.train_users):
            raise ValueError(f"{ratings.path}: each of the {ratings.num_users} users has one rating, which is held "
                             f"out (their latest): nothing is left to train on")
        try:
            self.candidates = data.ranking_candidates(data.rated_matrix(ratings), test, seed=args.seed)
        except ValueError as e:   # (a user with fewer than 99 unrated items)
            raise ValueError(f"{ratings.path}: {ratings.num_items} items; {e}") from None
        self.train_size = len(self.train_users) * (1 + data.NEGATIVES)
        self.trained = data.rated_matrix(ratings, self.train_users, self.train_items)   # (negatives: not these)

    def model(self, sparse=True):
        return NeuMF(self.ratings.num_users, self.ratings.num_items, sparse=sparse)

    def epoch(self, epoch):
        return data.ncf_epoch(self.train_users, self.train_items, self.trained, epoch, self.args.seed)

    def evaluate(self, module):
        users = self.candidates.shape[0]
        scores = runner.batched_scores(module, data.np.repeat(data.np.arange(users), self.candidates.shape[1]),
                                       self.candidates.reshape(-1))
        hr, ndcg = hit_ratio_and_ndcg(scores.reshape(self.candidates.shape), k=10)
        return {"HR@10": hr, "NDCG@10": ndcg}


def main(argv=None):
    parser = runner.arguments(__doc__.splitlines()[0], epochs=10, batch_size=256, lr=1e-3, optimizer="adam")
    runner.run(NCF, parser, argv)


if __name__ == "__main__":
    main()
