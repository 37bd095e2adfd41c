"""Server-side optimizers: what a parameter's shard does with each push. Each is minidl.optim's
own optimizer over the shard (so the update math is theirs, fused kernels included); a sparse
push arrives as a sparse COO gradient of the pushed rows, which SGD and Adagrad apply lazily and
Adam, on a row-sharded table, applies as SparseAdam."""
from __future__ import annotations

import minidl


class ServerOptimizer:
    """A description (kind, hyperparameters) that travels in a register message."""

    kind = 0

    def __init__(self, lr, a=0.0, b=0.0):
        self.lr, self.a, self.b = float(lr), float(a), float(b)

    def words(self):
        return [self.lr, self.a, self.b]

    def build(self, shard, sparse):
        raise NotImplementedError

    def __repr__(self):
        return f"ps.{type(self).__name__}(lr={self.lr})"


class SGD(ServerOptimizer):
    kind = 1

    def __init__(self, lr, momentum=0.0):
        super().__init__(lr, momentum)

    def build(self, shard, sparse):
        return minidl.optim.SGD([shard], lr=self.lr, momentum=self.a)


class Adagrad(ServerOptimizer):
    kind = 2

    def build(self, shard, sparse):
        return minidl.optim.Adagrad([shard], lr=self.lr)


class Adam(ServerOptimizer):
    kind = 3

    def __init__(self, lr, betas=(0.9, 0.999)):
        super().__init__(lr, *betas)

    def build(self, shard, sparse):
        cls = minidl.optim.SparseAdam if sparse else minidl.optim.Adam
        return cls([shard], lr=self.lr, betas=(self.a, self.b))


KINDS = {cls.kind: cls for cls in (SGD, Adagrad, Adam)}


def from_words(kind, words) -> ServerOptimizer:
    opt = KINDS[kind].__new__(KINDS[kind])
    ServerOptimizer.__init__(opt, *words[:3])
    return opt
