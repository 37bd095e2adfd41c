"""Adadelta (``torch.optim.Adadelta``; Zeiler 2012): steps scaled by the ratio of running RMS of past
updates to running RMS of gradients, so the units of the update match the parameter's."""
from __future__ import annotations

from ..autograd import no_grad
from .optimizer import Optimizer, _call_closure, _check_non_negative, _init_state, _params_with_grad, _update_grad


class Adadelta(Optimizer):
    sparse_error = "Adadelta does not support sparse gradients"

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
                 maximize=False, differentiable=False):
        _check_non_negative(lr=lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        _check_non_negative(eps=eps, weight_decay=weight_decay)
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        capturable=capturable, foreach=foreach, differentiable=differentiable)
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = _call_closure(closure)
        with no_grad():
            for group, p, state in _params_with_grad(self):
                rho, eps = group["rho"], group["eps"]
                _init_state(state, p, "square_avg", "acc_delta")
                state["step"].add_(1)
                grad = _update_grad(p, group)
                square_avg, acc_delta = state["square_avg"], state["acc_delta"]
                square_avg.mul_(rho).add_(grad * grad, alpha=1 - rho)
                delta = acc_delta.add(eps).sqrt_().div_(square_avg.add(eps).sqrt_()).mul_(grad)
                acc_delta.mul_(rho).add_(delta * delta, alpha=1 - rho)
                p.add_(delta, alpha=-group["lr"])
        return loss
