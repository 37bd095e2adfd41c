"""Adam and AdamW (``torch.optim.Adam`` / ``torch.optim.AdamW``), with AMSGrad: by default (and with
``foreach``/``fused``) every parameter of a group's device and dtype in one kernel launch, else one
fused launch per parameter (see ``optimizer._multi_tensor``)."""
from __future__ import annotations

from .. import ops
from ..autograd import no_grad
from .optimizer import (Optimizer, _buckets, _call_closure, _check_betas, _check_fused, _check_non_negative,
                        _init_state, _multi_tensor, _params_with_grad)


class Adam(Optimizer):
    sparse_error = "Adam does not support sparse gradients, please consider SparseAdam instead"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        _check_non_negative(lr=lr, eps=eps)
        _check_betas(betas)
        _check_non_negative(weight_decay=weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable, differentiable=differentiable,
                        fused=fused, decoupled_weight_decay=decoupled_weight_decay)
        _check_fused(fused, foreach, differentiable)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)
            group.setdefault("maximize", False)
            group.setdefault("decoupled_weight_decay", False)

    def step(self, closure=None):
        loss = _call_closure(closure)
        with no_grad():
            for group in self.param_groups:
                if _multi_tensor(group):
                    self._multi_tensor_step(group)
            for group, p, state in _params_with_grad(self, [g for g in self.param_groups if not _multi_tensor(g)]):
                lr, (beta1, beta2), weight_decay = group["lr"], group["betas"], group["weight_decay"]
                amsgrad, decoupled = group["amsgrad"], group["decoupled_weight_decay"]
                _init_state(state, p, "exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if amsgrad else ()))
                state["step"].add_(1)
                step = state["step"].item()
                ops._fused_adam_step_(
                    p, p.grad, state["exp_avg"], state["exp_avg_sq"], state.get("max_exp_avg_sq"),
                    beta1=beta1, beta2=beta2, eps=group["eps"], weight_decay=0 if decoupled else weight_decay,
                    decay=1 - lr * weight_decay if decoupled else 1, amsgrad=amsgrad, maximize=group["maximize"],
                    step_size=lr / (1 - beta1 ** step), bias_correction2_sqrt=(1 - beta2 ** step) ** 0.5)
        return loss

    def _multi_tensor_step(self, group):
        items = []
        for _, p, state in _params_with_grad(self, [group]):
            _init_state(state, p, "exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if group["amsgrad"] else ()))
            items.append((p, state))
        for bucket in _buckets(items):
            params = [p for p, _ in bucket]
            states = [s for _, s in bucket]
            ops._fused_adam_steps_(
                params, [p.grad for p in params], [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                [s["max_exp_avg_sq"] for s in states] if group["amsgrad"] else None, [s["step"] for s in states],
                lr=group["lr"], beta1=group["betas"][0], beta2=group["betas"][1], eps=group["eps"],
                weight_decay=group["weight_decay"], decoupled_weight_decay=group["decoupled_weight_decay"],
                amsgrad=group["amsgrad"], maximize=group["maximize"])


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p <- p * (1 - lr * weight_decay) first."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         foreach=foreach, maximize=maximize, capturable=capturable, differentiable=differentiable,
                         fused=fused, decoupled_weight_decay=True)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True
