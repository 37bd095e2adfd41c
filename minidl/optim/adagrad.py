"""Adagrad (``torch.optim.Adagrad``)."""
from __future__ import annotations

from .. import ops
from ..autograd import no_grad
from .optimizer import Optimizer, _call_closure


class Adagrad(Optimizer):
    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach, maximize=maximize,
                        differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        # as in PyTorch, the state exists from construction on
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["step"] = ops.tensor(0.0)
                state["sum"] = ops.full_like(p, group["initial_accumulator_value"])

    def step(self, closure=None):
        loss = _call_closure(closure)
        with no_grad():
            for group in self.param_groups:
                lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
                weight_decay, maximize = group["weight_decay"], group["maximize"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if len(state) == 0:  # a group added after construction
                        state["step"] = ops.tensor(0.0)
                        state["sum"] = ops.full_like(p, group["initial_accumulator_value"])
                    state["step"].add_(1)
                    step = state["step"].item()
                    grad = -p.grad if maximize else p.grad
                    if weight_decay != 0:
                        grad = grad.add(p, alpha=weight_decay)
                    clr = lr / (1 + (step - 1) * lr_decay)
                    state["sum"].add_(grad * grad)
                    std = state["sum"].sqrt().add_(eps)
                    p.add_(grad / std, alpha=-clr)
        return loss
