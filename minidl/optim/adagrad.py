"""Adagrad (``torch.optim.Adagrad``), on dense or sparse gradients: dense ones by default (and with
``foreach``/``fused``) every parameter of a group's device and dtype in one kernel launch, else a
chain of ops per parameter (see ``optimizer._multi_tensor``)."""
from __future__ import annotations

from .. import ops
from ..autograd import no_grad
from .optimizer import (Optimizer, _buckets, _call_closure, _check_fused, _check_non_negative, _multi_tensor,
                        _params_with_grad, _update_grad)


class Adagrad(Optimizer):
    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        _check_non_negative(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                            initial_accumulator_value=initial_accumulator_value, eps=eps)
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach, maximize=maximize,
                        differentiable=differentiable, fused=fused)
        _check_fused(fused, foreach, differentiable)
        super().__init__(params, defaults)
        for group in self.param_groups:                 # as in PyTorch, the state exists from construction on
            for p in group["params"]:
                _init_sum(self.state[p], p, group)

    def step(self, closure=None):
        loss = _call_closure(closure)
        with no_grad():
            dense: dict = {}   # id(group) -> its (param, state, group) for the multi-tensor step
            for group, p, state in _params_with_grad(self):
                if len(state) == 0:                         # a group added after construction
                    _init_sum(state, p, group)
                if _multi_tensor(group) and not p.grad.is_sparse:
                    dense.setdefault(id(group), []).append((p, state, group))
                    continue
                state["step"].add_(1)
                clr = group["lr"] / (1 + (state["step"].item() - 1) * group["lr_decay"])
                if p.grad.is_sparse:
                    _sparse_step(p, state["sum"], group, clr)
                    continue
                grad = _update_grad(p, group)
                state["sum"].add_(grad * grad)
                std = state["sum"].sqrt().add_(group["eps"])
                p.add_(grad / std, alpha=-clr)
            for items in dense.values():
                for bucket in _buckets(items):
                    self._multi_tensor_step(bucket)
        return loss

    @staticmethod
    def _multi_tensor_step(bucket):
        """One launch for the dense parameters of one group, device and dtype."""
        params = [p for p, _, _ in bucket]
        group = bucket[0][2]
        ops._fused_adagrad_steps_(params, [p.grad for p in params], [s["sum"] for _, s, _ in bucket],
                                  [s["step"] for _, s, _ in bucket], lr=group["lr"], lr_decay=group["lr_decay"],
                                  weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"])


def _init_sum(state, p, group) -> None:
    state["step"] = ops.tensor(0.0, device="cpu")
    state["sum"] = ops.full_like(p, group["initial_accumulator_value"])


def _sparse_step(p, sum_, group, clr):
    """The same update on the rows of a sparse gradient only (lazy: other rows' sums stay)."""
    if group["weight_decay"] != 0:
        raise RuntimeError("weight_decay option is not compatible with sparse gradients")
    grad = (-p.grad if group["maximize"] else p.grad).coalesce()   # (non-linear: one entry per row)
    rows, values = tuple(grad._indices()), grad._values()
    sum_.index_put_(rows, values * values, accumulate=True)
    p.index_put_(rows, values / sum_[rows].sqrt().add_(group["eps"]) * -clr, accumulate=True)
