"""RMSprop (``torch.optim.RMSprop``), plain or centered, with momentum."""
from __future__ import annotations

from ..autograd import no_grad
from .optimizer import (Optimizer, _call_closure, _check_non_negative, _init_state, _params_with_grad,
                        _update_grad)


class RMSprop(Optimizer):
    sparse_error = "RMSprop does not support sparse gradients"

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        _check_non_negative(lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay, alpha=alpha)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach, maximize=maximize,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = _call_closure(closure)
        with no_grad():
            for group, p, state in _params_with_grad(self):
                alpha, momentum, centered = group["alpha"], group["momentum"], group["centered"]
                _init_state(state, p, "square_avg", *(("momentum_buffer",) if momentum > 0 else ()),
                            *(("grad_avg",) if centered else ()))
                state["step"].add_(1)
                grad = _update_grad(p, group)
                square_avg = state["square_avg"]
                square_avg.mul_(alpha).add_(grad * grad, alpha=1 - alpha)
                if centered:
                    grad_avg = state["grad_avg"]
                    grad_avg.add_(grad - grad_avg, alpha=1 - alpha)  # lerp_(grad, 1 - alpha)
                    avg = (square_avg - grad_avg * grad_avg).sqrt()
                else:
                    avg = square_avg.sqrt()
                avg = avg.add_(group["eps"])
                if momentum > 0:
                    buf = state["momentum_buffer"]
                    buf.mul_(momentum).add_(grad / avg)
                    p.add_(buf, alpha=-group["lr"])
                else:
                    p.add_(grad / avg, alpha=-group["lr"])
        return loss
