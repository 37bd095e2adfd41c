"""NAdam (``torch.optim.NAdam``; Dozat 2016): Adam with Nesterov momentum — the step looks ahead with
the next momentum coefficient — and PyTorch's momentum warm-up ``mu_t = beta1 (1 - 0.96^(t psi) / 2)``."""
from __future__ import annotations

from ..autograd import no_grad
from .optimizer import (Optimizer, _call_closure, _check_betas, _check_non_negative, _init_state, _params_with_grad,
                        _update_grad, _update_moments_)


class NAdam(Optimizer):
    sparse_error = "NAdam does not support sparse gradients"

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        _check_non_negative(lr=lr, eps=eps)
        _check_betas(betas)
        _check_non_negative(weight_decay=weight_decay, momentum_decay=momentum_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize, foreach=foreach,
                        capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = _call_closure(closure)
        with no_grad():
            for group, p, state in _params_with_grad(self):
                lr, (beta1, beta2), psi = group["lr"], group["betas"], group["momentum_decay"]
                # mu_product a float32 scalar as in PyTorch, so that trajectories agree to the last bit
                _init_state(state, p, "exp_avg", "exp_avg_sq", mu_product=1.0)
                step = state["step"].add_(1).item()
                grad = _update_grad(p, group, decoupled=group["decoupled_weight_decay"])
                mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * psi))
                mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * psi))
                mu_product = state["mu_product"].mul_(mu).item()
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                _update_moments_(exp_avg, exp_avg_sq, grad, beta1, beta2)
                denom = exp_avg_sq.div(1 - beta2 ** step).sqrt_().add_(group["eps"])
                p.add_(grad / denom, alpha=-lr * (1.0 - mu) / (1.0 - mu_product))
                p.add_(exp_avg / denom, alpha=-lr * mu_next / (1.0 - mu_product * mu_next))
        return loss
