"""Server-side optimizers: what a parameter's shard does with each push. Each is minidl.optim's
own optimizer over the shard (so the update math is theirs, fused kernels included); a sparse
push arrives as a sparse COO gradient of the pushed rows, which SGD and Adagrad apply lazily and
Adam, on a row-sharded table, applies as SparseAdam."""
from __future__ import annotations

import minidl


class ServerOptimizer:
    """A description (kind, hyperparameters) that travels in a register message."""

    kind = 0
    counts_steps = False   # (an optimizer whose update depends on its step count: Adam's bias correction)

    def __init__(self, lr, a=0.0, b=0.0):
        self.lr, self.a, self.b = float(lr), float(a), float(b)

    def words(self):
        return [self.lr, self.a, self.b]

    def build(self, shard, sparse):
        """The minidl.optim optimizer of a server's shard: each kind below makes its own."""
        raise NotImplementedError(f"{type(self).__name__} is a base class: use ps.SGD, ps.Adagrad or ps.Adam")

    def __repr__(self):
        return f"ps.{type(self).__name__}(lr={self.lr})"


class SGD(ServerOptimizer):
    kind = 1

    def __init__(self, lr, momentum=0.0):
        super().__init__(lr, momentum)

    def build(self, shard, sparse):
        if sparse and self.a:
            return _LazyMomentum(shard, self.lr, self.a)
        return minidl.optim.SGD([shard], lr=self.lr, momentum=self.a)


class _LazyMomentum:
    """SGD with momentum on the pushed rows of a row-sharded table only: their momentum and values
    move, every other row's stay (torch's sparse SGD would decay every row its buffer ever held).
    The update is minidl's fused SGD step, run on the gathered rows."""

    def __init__(self, shard, lr, momentum):
        self.shard, self.lr, self.momentum = shard, lr, momentum
        self.buffer = minidl.zeros_like(shard)

    def step(self):
        grad = self.shard.grad.coalesce()
        rows, g = tuple(grad.indices()), grad.values()
        with minidl.no_grad():
            p, buf = self.shard[rows], self.buffer[rows]
            minidl._fused_sgd_step_(p, g, buf, first=False, lr=self.lr, weight_decay=0, momentum=self.momentum,
                                    dampening=0, nesterov=False, maximize=False)
            self.shard.index_put_(rows, p)
            self.buffer.index_put_(rows, buf)

    def state_dict(self):
        return {"buffer": self.buffer}

    def load_state_dict(self, state):
        self.buffer.copy_(state["buffer"])


class Adagrad(ServerOptimizer):
    kind = 2

    def build(self, shard, sparse):
        return minidl.optim.Adagrad([shard], lr=self.lr)


class Adam(ServerOptimizer):
    kind, counts_steps = 3, True

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
