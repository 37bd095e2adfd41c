"""ZeroRedundancyOptimizer (torch's; ZeRO stage 1): each rank keeps the optimizer state of a share of the
parameters only, steps that share, and sends the updated share to the others.

Data-parallel ranks hold the same parameters and, after DDP's all-reduce, the same gradients, so every rank's
optimizer would do the same work on the same state — for Adam two extra copies of the model on every rank. Here
the parameters are dealt out once, largest first, each to the rank holding the fewest elements so far (torch's
rule, so a rank's share is the same in both libraries); rank r's local optimizer (any minidl optimizer class) is
built on its share alone, and after its step each rank broadcasts its share's new values. The optimizer state
per rank falls to about 1/k; the step sends each parameter once.

The state_dict a ZeroRedundancyOptimizer returns is a plain optimizer's (one index per parameter, in the order of
the parameter groups), so it loads into the same optimizer class without ZeRO, or into ZeRO at another world size.
It is assembled on one rank by ``consolidate_state_dict(to)``, which every rank calls.
"""
from __future__ import annotations

from itertools import chain

from ...autograd.grad_mode import no_grad
from ...ops.shape_ops import cat
from ...optim.optimizer import Optimizer
from .. import collectives, objects
from ..state import resolve

__all__ = ["ZeroRedundancyOptimizer"]

_HYPER = "params"   # (every other key of a group is a hyperparameter, kept in step with the local optimizer's)


class ZeroRedundancyOptimizer(Optimizer):
    """``optimizer_class(share, **defaults)`` on this rank's share of ``params`` (tensors or parameter groups).
    ``process_group``: the ranks that share the state (the default group). ``parameters_as_bucket_view``: each
    rank's share travels as one flat buffer (one broadcast per rank) rather than one broadcast per parameter.
    ``overlap_with_ddp`` (running the step inside DDP's communication hook) is not supported: an error says so."""

    def __init__(self, params, optimizer_class, process_group=None, parameters_as_bucket_view: bool = False,
                 overlap_with_ddp: bool = False, **defaults):
        if overlap_with_ddp:
            raise NotImplementedError("ZeroRedundancyOptimizer: overlap_with_ddp=True (the step inside DDP's "
                                      "communication hook) is not supported; pass overlap_with_ddp=False")
        super().__init__(params, defaults)
        self.process_group = process_group
        self._group = resolve(process_group, "ZeroRedundancyOptimizer")
        self.world_size, self.rank = self._group.size, self._group.rank
        self.parameters_as_bucket_view = parameters_as_bucket_view
        self._shares = self._partition()
        self.optim = optimizer_class([{**g, "params": list(g["params"])} for g in self._shares[self.rank]],
                                     **defaults)
        self._all_state_dicts = []

    def _partition(self) -> list:
        """Per rank, its share as parameter groups (one per group of this optimizer, possibly empty)."""
        shares = [[] for _ in range(self.world_size)]
        held = [0] * self.world_size
        for group in self.param_groups:
            mine = [[] for _ in range(self.world_size)]
            for p in sorted(group["params"], key=lambda t: t.numel(), reverse=True):
                r = held.index(min(held))
                mine[r].append(p)
                held[r] += p.numel()
            for r in range(self.world_size):
                shares[r].append({**{k: v for k, v in group.items() if k != _HYPER}, "params": mine[r]})
        return shares

    # -- stepping ----------------------------------------------------------------------------------
    def step(self, closure=None, **kwargs):
        """The local optimizer's step on this rank's share (hyperparameters as this optimizer's groups have them
        now: a scheduler changes them here), then every share sent from its rank to the others."""
        _copy_hyperparameters(self.param_groups, self.optim.param_groups)
        loss = self.optim.step(**kwargs) if closure is None else self.optim.step(closure=closure, **kwargs)
        _copy_hyperparameters(self.optim.param_groups, self.param_groups)
        for r in range(self.world_size):
            self._send_share(r)
        return loss

    def _send_share(self, r: int) -> None:
        params = [p for g in self._shares[r] for p in g["params"]]
        if not params:
            return
        src = self._group.ranks[r]
        with no_grad():
            if not self.parameters_as_bucket_view:
                for p in params:
                    collectives.broadcast(p.detach(), src=src, group=self._group)
                return
            bucket = cat([p.detach().reshape(-1) for p in params]).contiguous()
            collectives.broadcast(bucket, src=src, group=self._group)
            start = 0
            for p in params:
                p.detach().copy_(bucket[start:start + p.numel()].reshape(p.shape))
                start += p.numel()

    # -- state -------------------------------------------------------------------------------------
    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every rank's local state on rank ``to`` of the group (every rank calls it); ``state_dict()``
        then works there."""
        _copy_hyperparameters(self.param_groups, self.optim.param_groups)
        found = [None] * self.world_size
        objects.all_gather_object(found, self.optim.state_dict(), group=self._group)
        self._all_state_dicts = found if self.rank == to else []

    def state_dict(self) -> dict:
        """The whole optimizer's state, as a plain optimizer's, on the rank it was consolidated to."""
        if not self._all_state_dicts:
            raise RuntimeError(f"ZeroRedundancyOptimizer: the optimizer state has not been consolidated on rank "
                               f"{self.rank}; call consolidate_state_dict(to={self.rank}) on every rank first")
        whole = super().state_dict()   # (the groups' hyperparameters and every parameter's global index)
        index = self._global_index()
        state = {}
        for share, local in zip(self._shares, self._all_state_dicts):
            mine = list(chain.from_iterable(g["params"] for g in share))
            for k, value in local["state"].items():
                state[index[id(mine[k])]] = value
        whole["state"] = dict(sorted(state.items()))
        return whole

    def load_state_dict(self, state_dict: dict) -> None:
        """A plain optimizer's state dict (or one this class returned): each rank loads its share's state only."""
        super().load_state_dict({"state": {}, "param_groups": state_dict["param_groups"]})   # (checked; the groups)
        index, saved = self._global_index(), state_dict["state"]
        share = self._shares[self.rank]
        local = [p for g in share for p in g["params"]]
        self.optim.load_state_dict({
            "state": {k: saved[index[id(p)]] for k, p in enumerate(local) if index[id(p)] in saved},
            "param_groups": [{**{k: v for k, v in g.items() if k != _HYPER},
                              "params": list(range(start, start + len(mine["params"])))}
                             for g, mine, start in zip(self.param_groups, share, _starts(share))]})

    def _global_index(self) -> dict:
        """id(parameter) -> its index in a plain optimizer's state dict (counted across the groups)."""
        return {id(p): i for i, p in enumerate(chain.from_iterable(g["params"] for g in self.param_groups))}


def _starts(groups) -> list:
    """The first local index of each group's parameters (indices count across groups)."""
    starts, n = [], 0
    for g in groups:
        starts.append(n)
        n += len(g["params"])
    return starts


def _copy_hyperparameters(source, target) -> None:
    for s, t in zip(source, target):
        t.update({k: v for k, v in s.items() if k != _HYPER})
