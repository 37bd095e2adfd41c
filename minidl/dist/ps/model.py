"""A module trained through the parameter server: Downpour SGD (Dean et al., 2012).

    model = ps.DistributedModel(net, optimizer=ps.Adagrad(lr=0.05), pull_every=1, push_every=1)
    for x, y in batches:
        loss_fn(model(x), y).backward()
        model.step()          # pushes (every push_every steps), then ps.clock()

Every worker registers the module's parameters under their names (the same module, the same
values, on every worker). A forward pulls the dense parameters every ``pull_every`` steps; a
sparse embedding (``nn.Embedding(sparse=True)``) pulls only the rows its input looks up, just
before its lookup. ``step()`` pushes the gradients accumulated since the last push every
``push_every`` steps (a sparse embedding's rows only), clears them, and ends the worker's
iteration with ``ps.clock()``: the consistency model set in ``ps.init`` decides who waits.
"""
from __future__ import annotations

import minidl
from minidl.nn import Embedding

from . import clock, pull, push, register


class DistributedModel:
    def __init__(self, module, optimizer, pull_every: int = 1, push_every: int = 1, prefix: str = ""):
        if pull_every < 1 or push_every < 1:
            raise ValueError(f"ps.DistributedModel: pull_every={pull_every} and push_every={push_every} must be >= 1")
        self.module, self.pull_every, self.push_every, self.steps = module, pull_every, push_every, 0
        self.names = {id(p): prefix + name for name, p in module.named_parameters()}
        tables = [m for m in module.modules() if isinstance(m, Embedding) and m.sparse]
        self.sparse = {id(m.weight) for m in tables}
        for name, p in module.named_parameters():
            register(prefix + name, p.detach(), optimizer=optimizer, sparse=id(p) in self.sparse)
        for table in tables:
            table.register_forward_pre_hook(self._pull_rows)

    def __call__(self, *args, **kwargs):
        if self._pulling():
            with minidl.no_grad():
                for p in self.module.parameters():
                    if id(p) not in self.sparse:
                        p.copy_(pull(self.names[id(p)]))
        return self.module(*args, **kwargs)

    def _pulling(self) -> bool:
        return self.steps % self.pull_every == 0

    def _pull_rows(self, table, inputs):
        """Before a sparse embedding's lookup: fetch the rows it is about to read."""
        if self._pulling():
            rows = inputs[0].reshape(-1).long().unique()
            with minidl.no_grad():
                table.weight.index_put_((rows,), pull(self.names[id(table.weight)], rows))

    def step(self) -> None:
        """After backward: push what accumulated (every ``push_every`` steps), then ``ps.clock()``."""
        self.steps += 1
        if self.steps % self.push_every == 0:
            works = [push(self.names[id(p)], p.grad) for p in self.module.parameters() if p.grad is not None]
            for work in works:
                work.wait()   # (the gradients' memory is read until then)
            for p in self.module.parameters():
                p.grad = None
        clock()

    def parameters(self):
        return self.module.parameters()
