"""Wide & Deep click prediction on MovieLens ratings through minidl's parameter server (or in one process).

    python examples/wide_deep_ps.py --servers 0                     # one process, generated ratings
    mpiexec -n 4 python examples/wide_deep_ps.py --servers 1 --consistency ssp --staleness 2 [--mode hybrid]
    mpiexec -n 4 python examples/wide_deep_ps.py --servers 1 --data ~/data/ml-1m
    # over gloo, no MPI (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), losing the last worker at step 400:
    for r in 0 1 2 3; do RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 \
        python examples/wide_deep_ps.py --servers 1 --consistency asp --kill-worker-at 400 & done; wait

Click prediction as the Wide & Deep paper frames recommendation: a rating >= 4 is a click; a
seeded 80/20 split of the ratings holds out the test set, scored by AUC. The wide part memorises
the user, the item and the (user, item) cross; the deep part generalises through their
embeddings. Without --data the ratings are generated (minidl.vision.datasets.write_movielens).
Options and the distributed setup: examples/recsys/runner.py.
"""
from minidl.models import WideDeep
from minidl.models.metrics import auc

from recsys import data, runner


class ClickPrediction:
    name = "wide-deep"

    def __init__(self, ratings, args):
        self.ratings, self.args = ratings, args
        self.train, self.test = data.click_split(ratings, seed=args.seed)
        clicks = self.test[2]
        if not len(clicks):
            raise ValueError(f"{ratings.path}: {len(ratings)} ratings, of which a fifth (rounded) is held out: none; "
                             f"Wide & Deep needs at least 3")
        self.train_size = len(self.train[0])
        if clicks.min() == clicks.max():
            raise ValueError(f"{ratings.path}: every held-out rating is {'a click' if clicks[0] else 'no click'} "
                             f"(rating >= 4): AUC needs both")

    def model(self, sparse=True):
        return WideDeep(self.ratings.num_users, self.ratings.num_items, sparse=sparse)

    def epoch(self, epoch):
        return data.shuffled(self.train, epoch, self.args.seed)

    def evaluate(self, module):
        users, items, clicks = self.test
        return {"AUC": auc(clicks, runner.batched_scores(module, users, items))}


def main(argv=None):
    parser = runner.arguments(__doc__.splitlines()[0], epochs=10, batch_size=256, lr=0.05, optimizer="adagrad")
    runner.run(ClickPrediction, parser, argv)


if __name__ == "__main__":
    main()
