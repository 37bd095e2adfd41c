"""A module trained through the parameter server: Downpour SGD (Dean et al., 2012).

    model = ps.DistributedModel(net, optimizer=ps.Adagrad(lr=0.05), pull_every=1, push_every=1)
    for x, y in batches:
        loss_fn(model(x), y).backward()
        model.step()          # pushes (every push_every steps), then ps.clock()

Every worker registers the module's parameters under their names (the same module, the same values,
on every worker). With ``hybrid=True`` (Hetu's hybrid mode) only the sparse embeddings go through
the servers: every other parameter stays replicated on the workers, starts as worker 0's, and each
push step averages its gradients over ``ps.worker_group()`` with minidl.dist's all-reduce (as DDP
does) and applies them with ``dense_optimizer(params)``, a minidl.optim one. A forward pulls the
dense parameters every ``pull_every`` steps; a sparse embedding (``nn.Embedding(sparse=True)``)
pulls only the rows its input looks up, just before its lookup. ``step()`` pushes the gradients
accumulated since the last push every ``push_every`` steps (a sparse embedding's rows only), clears
them, and ends the worker's iteration with ``ps.clock()``: the consistency model set in ``ps.init``
decides who waits.

Every gradient leaves the worker divided by the number of workers, as DDP averages: the servers'
sum of one iteration's pushes is the workers' mean gradient (the active ones, ``ps.active_workers()``:
after a worker is lost or joins, a round of pushes is still one mean gradient). So one learning rate serves any
number of workers, and under BSP (the servers sum an iteration's pushes and take one optimizer
step) W workers on batches of b train exactly as one process on batches of W * b (each batch the
union of the workers' ones), with any server-side optimizer. Under SSP and ASP each push is a step
of its own, 1/W of its worker's: the workers' steps add up to one process's per round.
"""
from __future__ import annotations

import minidl
from minidl.nn import Embedding

from .. import collectives
from . import active_workers, clock, num_workers, pull, push, register, worker_group


class DistributedModel:
    def __init__(self, module, optimizer, pull_every: int = 1, push_every: int = 1, prefix: str = "",
                 hybrid: bool = False, dense_optimizer=None):
        if pull_every < 1 or push_every < 1:
            raise ValueError(f"ps.DistributedModel: pull_every={pull_every} and push_every={push_every} must be >= 1")
        if hybrid and dense_optimizer is None:
            raise ValueError("ps.DistributedModel(hybrid=True): give dense_optimizer, e.g. "
                             "lambda params: minidl.optim.Adam(params, lr=1e-3), for the replicated dense layers")
        self.module, self.pull_every, self.push_every, self.steps = module, pull_every, push_every, 0
        self.names = {id(p): prefix + name for name, p in module.named_parameters()}
        tables = [m for m in module.modules() if isinstance(m, Embedding) and m.sparse]
        self.sparse = {id(m.weight) for m in tables}
        self.replicated = [p for p in module.parameters() if hybrid and id(p) not in self.sparse]
        self.local = {id(p) for p in self.replicated}   # (not on the servers)
        for name, p in module.named_parameters():
            if id(p) not in self.local:
                register(prefix + name, p.detach(), optimizer=optimizer, sparse=id(p) in self.sparse)
        for table in tables:
            table.register_forward_pre_hook(self._pull_rows)
        self.dense_optimizer = dense_optimizer(self.replicated) if self.replicated else None
        with minidl.no_grad():
            for p in self.replicated:   # (the replicas start equal: worker 0's values)
                collectives.broadcast(p.detach(), src=0, group=worker_group())

    def __call__(self, *args, **kwargs):
        if self._pulling():
            with minidl.no_grad():
                for p in self.module.parameters():
                    if id(p) not in self.sparse and id(p) not in self.local:
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
            works = [push(self.names[id(p)], p.grad / active_workers()) for p in self.module.parameters()
                     if p.grad is not None and id(p) not in self.local]
            if self.dense_optimizer is not None:
                self._average_replicated()
                self.dense_optimizer.step()
            for work in works:
                work.wait()   # (the gradients' memory is read until then)
            for p in self.module.parameters():
                p.grad = None
        clock()

    def _average_replicated(self):
        """The replicated layers' gradients averaged over the workers: one all-reduce per dtype of
        all of them flattened together (as DDP's buckets: one message, not one per layer)."""
        with minidl.no_grad():
            for p in self.replicated:
                if p.grad is None:
                    p.grad = minidl.zeros_like(p)
            for dtype in dict.fromkeys(p.dtype for p in self.replicated):   # (the same order on every worker)
                grads = [p.grad for p in self.replicated if p.dtype is dtype]
                flat = minidl.cat([g.reshape(-1) for g in grads])
                collectives.all_reduce(flat, group=worker_group())
                flat.div_(num_workers())
                start = 0
                for g in grads:
                    g.copy_(flat[start:start + g.numel()].reshape(g.shape))
                    start += g.numel()

    def pull_parameters(self) -> None:
        """Fetch every parameter the servers hold, whole (a sparse table's every row), into the
        module: before evaluating or saving it."""
        with minidl.no_grad():
            for p in self.module.parameters():
                if id(p) not in self.local:
                    p.copy_(pull(self.names[id(p)]))

    def parameters(self):
        return self.module.parameters()
