"""SparseAdam (``torch.optim.SparseAdam``): Adam for sparse gradients, such as an embedding table's
with ``sparse=True``, updating lazily: a row's moments and value change only in the steps whose
gradient holds it (bias correction still counts every step of the parameter)."""
from __future__ import annotations

import math

from .. import ops
from ..autograd import no_grad
from .optimizer import Optimizer, _call_closure


class SparseAdam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False):
        if not 0.0 < lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, maximize=maximize))

    def step(self, closure=None):
        loss = _call_closure(closure)
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if not p.grad.is_sparse:
                        raise RuntimeError("SparseAdam does not support dense gradients, please consider Adam instead")
                    state = self.state[p]
                    if len(state) == 0:
                        state["step"] = 0
                        state["exp_avg"], state["exp_avg_sq"] = ops.zeros_like(p), ops.zeros_like(p)
                    state["step"] += 1
                    _step(p, state, group)
        return loss


def _step(p, state, group):
    grad = (-p.grad if group["maximize"] else p.grad).coalesce()   # (non-linear: one entry per row)
    rows, g = tuple(grad._indices()), grad._values()
    if g.numel() == 0:
        return
    beta1, beta2 = group["betas"]
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    old_m, old_v = exp_avg[rows], exp_avg_sq[rows]       # the moments of these rows only
    m_change, v_change = (g - old_m) * (1 - beta1), (g * g - old_v) * (1 - beta2)
    exp_avg.index_put_(rows, m_change, accumulate=True)
    exp_avg_sq.index_put_(rows, v_change, accumulate=True)
    step = state["step"]
    step_size = group["lr"] * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
    p.index_put_(rows, (m_change + old_m) / ((v_change + old_v).sqrt() + group["eps"]) * -step_size, accumulate=True)
