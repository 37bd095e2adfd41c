"""RMSprop (``torch.optim.RMSprop``), plain or centered, with momentum."""
from __future__ import annotations

from .. import ops
from ..autograd import no_grad
from .optimizer import Optimizer, _call_closure


class RMSprop(Optimizer):
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach, maximize=maximize,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = _call_closure(closure)
        with no_grad():
            for group in self.param_groups:
                lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
                weight_decay, momentum = group["weight_decay"], group["momentum"]
                centered, maximize = group["centered"], group["maximize"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if len(state) == 0:
                        state["step"] = ops.tensor(0.0)
                        state["square_avg"] = ops.zeros_like(p)
                        if momentum > 0:
                            state["momentum_buffer"] = ops.zeros_like(p)
                        if centered:
                            state["grad_avg"] = ops.zeros_like(p)
                    grad = -p.grad if maximize else p.grad
                    state["step"].add_(1)
                    if weight_decay != 0:
                        grad = grad.add(p, alpha=weight_decay)
                    square_avg = state["square_avg"]
                    square_avg.mul_(alpha).add_(grad * grad, alpha=1 - alpha)
                    if centered:
                        grad_avg = state["grad_avg"]
                        grad_avg.add_(grad - grad_avg, alpha=1 - alpha)  # lerp_(grad, 1 - alpha)
                        avg = (square_avg - grad_avg * grad_avg).sqrt()
                    else:
                        avg = square_avg.sqrt()
                    avg = avg.add_(eps)
                    if momentum > 0:
                        buf = state["momentum_buffer"]
                        buf.mul_(momentum).add_(grad / avg)
                        p.add_(buf, alpha=-lr)
                    else:
                        p.add_(grad / avg, alpha=-lr)
        return loss
