"""RAdam (``torch.optim.RAdam``; Liu et al. 2019): Adam whose adaptive step is rectified by the variance
of the adaptive learning rate, and plain bias-corrected momentum SGD while that variance is intractable
(the approximated SMA length ``rho_t`` is 5 or less)."""
from __future__ import annotations

from ..autograd import no_grad
from .optimizer import (Optimizer, _call_closure, _check_betas, _check_non_negative, _init_state, _params_with_grad,
                        _update_grad, _update_moments_)


class RAdam(Optimizer):
    sparse_error = "RAdam does not support sparse gradients"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        _check_non_negative(lr=lr, eps=eps)
        _check_betas(betas)
        _check_non_negative(weight_decay=weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable, decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = _call_closure(closure)
        with no_grad():
            for group, p, state in _params_with_grad(self):
                lr, (beta1, beta2) = group["lr"], group["betas"]
                _init_state(state, p, "exp_avg", "exp_avg_sq")
                step = state["step"].add_(1).item()
                grad = _update_grad(p, group, decoupled=group["decoupled_weight_decay"])
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                _update_moments_(exp_avg, exp_avg_sq, grad, beta1, beta2)
                bias_correction2 = 1 - beta2 ** step
                update = exp_avg / (1 - beta1 ** step) * lr
                rho_inf = 2 / (1 - beta2) - 1
                rho_t = rho_inf - 2 * step * beta2 ** step / bias_correction2
                if rho_t > 5.0:
                    rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
                    adaptive = bias_correction2 ** 0.5 / exp_avg_sq.sqrt().add_(group["eps"])
                    update = update.mul_(adaptive).mul_(rect)
                p.add_(update, alpha=-1.0)
        return loss
