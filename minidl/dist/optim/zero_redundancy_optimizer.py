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

With ``overlap_with_ddp=True`` the step moves into DDP's backward (``ddp_comm_hooks.hook_with_zero_step``): the
shares are DDP's gradient buckets, each wholly on the rank holding the fewest elements so far, and a bucket's
owner steps it as soon as its averaged gradients are collected; the shares are broadcast after the last bucket.
``step()`` then does nothing (torch's). Unlike torch's, whose buckets settle only after two iterations (which
take no step), minidl's DDP buckets are fixed when DDP is built, so the first iteration steps.
"""
from __future__ import annotations

import warnings
from itertools import chain

from ...autograd.grad_mode import no_grad
from ...ops.shape_ops import cat
from ...optim.optimizer import Optimizer
from .. import collectives, objects
from ..state import resolve

__all__ = ["ZeroRedundancyOptimizer"]

_HYPER = "params"   # (every other key of a group is a hyperparameter, kept in step with the local optimizer's)


def deal(params, held) -> list:
    """[(parameter, rank)]: each of ``params``, the largest first, to the rank holding the fewest elements so far
    (``held``: per rank, counted on here). Anything with ``numel()`` deals: a planner deals shapes alike."""
    dealt = []
    for p in sorted(params, key=lambda t: t.numel(), reverse=True):
        r = held.index(min(held))
        dealt.append((p, r))
        held[r] += p.numel()
    return dealt


class ZeroRedundancyOptimizer(Optimizer):
    """``optimizer_class(share, **defaults)`` on this rank's share of ``params`` (tensors or parameter groups).
    ``process_group``: the ranks that share the state (the default group). ``parameters_as_bucket_view``: each
    rank's share travels as one flat buffer (one broadcast per rank) rather than one broadcast per parameter.
    ``overlap_with_ddp``: the step runs inside DDP's backward, registered with ``hook_with_zero_step`` (one
    parameter group only, as torch's)."""

    def __init__(self, params, optimizer_class, process_group=None, parameters_as_bucket_view: bool = False,
                 overlap_with_ddp: bool = False, **defaults):
        super().__init__(params, defaults)
        self.process_group = process_group
        self._group = resolve(process_group, "ZeroRedundancyOptimizer")
        self.world_size, self.rank = self._group.size, self._group.rank
        self.parameters_as_bucket_view = parameters_as_bucket_view
        self._optimizer_class, self._defaults, self._all_state_dicts = optimizer_class, defaults, []
        self._overlap_with_ddp, self._owners = overlap_with_ddp, None   # (_owners: each DDP bucket's rank)
        if overlap_with_ddp:
            if len(self.param_groups) != 1:
                raise ValueError(f"ZeroRedundancyOptimizer: overlap_with_ddp=True supports a single parameter "
                                 f"group (got {len(self.param_groups)})")
            self._shares = self.optim = None   # (dealt out by DDP's buckets: hook_with_zero_step)
        else:
            self._shares = self._partition()
            self.optim = self._local_optimizer()

    def _local_optimizer(self):
        """The optimizer of this rank's share; its class's defaults become this optimizer's groups' too (so that
        their state dict is the plain optimizer's, loadable into it, from the start)."""
        local = self._optimizer_class([{**g, "params": list(g["params"])} for g in self._shares[self.rank]],
                                      **self._defaults)
        _copy_hyperparameters(local.param_groups, self.param_groups)
        return local

    def _partition(self) -> list:
        """Per rank, its share as parameter groups (one per group of this optimizer, possibly empty)."""
        shares = [[] for _ in range(self.world_size)]
        held = [0] * self.world_size
        for group in self.param_groups:
            mine = [[] for _ in range(self.world_size)]
            for p, r in deal(group["params"], held):
                mine[r].append(p)
            for r in range(self.world_size):
                shares[r].append({**{k: v for k, v in group.items() if k != _HYPER}, "params": mine[r]})
        return shares

    # -- stepping ----------------------------------------------------------------------------------
    def step(self, closure=None, **kwargs):
        """The local optimizer's step on this rank's share (hyperparameters as this optimizer's groups have them
        now: a scheduler changes them here), then every share sent from its rank to the others."""
        if self._overlap_with_ddp:
            warnings.warn("ZeroRedundancyOptimizer: `step()` should not be included in the training loop when "
                          "`overlap_with_ddp=True` (the step runs in DDP's backward)", stacklevel=2)
            return None
        _copy_hyperparameters(self.param_groups, self.optim.param_groups)
        loss = self.optim.step(**kwargs) if closure is None else self.optim.step(closure=closure, **kwargs)
        _copy_hyperparameters(self.optim.param_groups, self.param_groups)
        self._send_shares()
        return loss

    def _assign_buckets(self, buckets) -> None:
        """overlap_with_ddp: each DDP bucket (its parameters, in DDP's order) wholly to the rank holding the fewest
        elements so far; this rank's optimizer on its buckets' parameters."""
        params = [p for b in buckets for p in b]
        if {id(p) for p in params} != {id(p) for p in self.param_groups[0]["params"] if p.requires_grad}:
            raise ValueError("hook_with_zero_step: the ZeroRedundancyOptimizer's parameters must be the DDP "
                             "module's trainable parameters")
        held, mine, self._owners = [0] * self.world_size, [[] for _ in range(self.world_size)], []
        for bucket in buckets:
            r = held.index(min(held))
            self._owners.append(r)
            mine[r] += bucket
            held[r] += sum(p.numel() for p in bucket)
        hyper = {k: v for k, v in self.param_groups[0].items() if k != _HYPER}
        self._shares = [[{**hyper, "params": m}] for m in mine]
        self.optim = self._local_optimizer()

    def _step_bucket(self, index: int, params, grads) -> None:
        """overlap_with_ddp: bucket ``index``'s owner steps its parameters with their averaged gradients (the
        other parameters' gradients set aside meanwhile, so that the step touches this bucket only)."""
        if self._owners[index] != self.rank:
            return
        owned = [p for g in self.optim.param_groups for p in g["params"]]
        aside = [p.grad for p in owned]
        for p in owned:
            p.grad = None
        for p, g in zip(params, grads):
            p.grad = g
        _copy_hyperparameters(self.param_groups, self.optim.param_groups)
        self.optim.step()
        for p, g in zip(owned, aside):
            p.grad = g

    def _send_shares(self) -> None:
        for r in range(self.world_size):
            self._send_share(r)

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
        self._dealt("consolidate_state_dict")
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
        self._dealt("load_state_dict")
        super().load_state_dict({"state": {}, "param_groups": state_dict["param_groups"]})   # (checked; the groups)
        index, saved = self._global_index(), state_dict["state"]
        share = self._shares[self.rank]
        local = [p for g in share for p in g["params"]]
        self.optim.load_state_dict({
            "state": {k: saved[index[id(p)]] for k, p in enumerate(local) if index[id(p)] in saved},
            "param_groups": [{**{k: v for k, v in g.items() if k != _HYPER},
                              "params": list(range(start, start + len(mine["params"])))}
                             for g, mine, start in zip(self.param_groups, share, _starts(share))]})

    def _dealt(self, what) -> None:
        if self.optim is None:
            raise RuntimeError(f"ZeroRedundancyOptimizer.{what}: with overlap_with_ddp=True the shares are DDP's "
                               f"buckets, dealt out by hook_with_zero_step: register it with the DDP module first")

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
