"""Adamax (``torch.optim.Adamax``; Kingma & Ba 2015, section 7.1): Adam with the second moment replaced by
an exponentially weighted infinity norm of the gradients, which needs no bias correction."""
from __future__ import annotations

from .. import ops
from ..autograd import no_grad
from .optimizer import (Optimizer, _call_closure, _check_betas, _check_non_negative, _init_state, _params_with_grad,
                        _update_grad)


class Adamax(Optimizer):
    sparse_error = "Adamax does not support sparse gradients"

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
                 maximize=False, differentiable=False, capturable=False):
        _check_non_negative(lr=lr, eps=eps)
        _check_betas(betas)
        _check_non_negative(weight_decay=weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = _call_closure(closure)
        with no_grad():
            for group, p, state in _params_with_grad(self):
                beta1, beta2 = group["betas"]
                _init_state(state, p, "exp_avg", "exp_inf")
                state["step"].add_(1)
                grad = _update_grad(p, group)
                exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
                exp_avg.add_(grad - exp_avg, alpha=1 - beta1)
                # eps inside the max keeps the divisor positive where a gradient has always been zero
                exp_inf.copy_(ops.maximum(exp_inf.mul_(beta2), grad.abs().add_(group["eps"])))
                step_size = group["lr"] / (1 - beta1 ** state["step"].item())
                p.add_(exp_avg / exp_inf, alpha=-step_size)
        return loss
