"""Stochastic gradient descent (``torch.optim.SGD``), with momentum and Nesterov momentum, on dense
gradients (by default and with ``foreach``/``fused`` every parameter of a group's device and dtype in
one kernel launch, else one fused launch per parameter: see ``optimizer._multi_tensor``) or sparse
ones (the rows they hold)."""
from __future__ import annotations

from .. import ops
from ..autograd import no_grad
from .optimizer import Optimizer, _buckets, _call_closure, _check_fused, _multi_tensor


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False, foreach=None, differentiable=False, fused=None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach, differentiable=differentiable,
                        fused=fused)
        _check_fused(fused, foreach, differentiable)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)

    def step(self, closure=None):
        loss = _call_closure(closure)
        with no_grad():
            for group in self.param_groups:
                hyper = {k: group[k] for k in ("lr", "weight_decay", "momentum", "dampening", "nesterov", "maximize")}
                if _multi_tensor(group):
                    self._multi_tensor_step(group, hyper)
                    continue
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if p.grad.is_sparse:
                        _sparse_step(p, self.state[p], **hyper)
                        continue
                    buf, first = self._momentum_buffer(p, group)
                    ops._fused_sgd_step_(p, p.grad, buf, first=first, **hyper)
        return loss

    def _momentum_buffer(self, p, group):
        """(p's momentum buffer, whether it is new: the step fills it with the gradient); None without momentum."""
        if group["momentum"] == 0:
            return None, False
        state = self.state[p]
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = state["momentum_buffer"] = ops.empty_like(p)
            return buf, True
        return buf, False

    def _multi_tensor_step(self, group, hyper):
        dense = []
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                _sparse_step(p, self.state[p], **hyper)
            else:
                dense.append((p, *self._momentum_buffer(p, group)))
        for bucket in _buckets(dense):
            params = [p for p, _, _ in bucket]
            buffers = [b for _, b, _ in bucket] if group["momentum"] != 0 else None
            ops._fused_sgd_steps_(params, [p.grad for p in params], buffers, firsts=[f for _, _, f in bucket],
                                  **hyper)


def _sparse_step(p, state, lr, weight_decay, momentum, dampening, nesterov, maximize):
    """torch's SGD step on a sparse gradient: only the rows it holds move (with momentum, the rows
    its sparse buffer has ever held). Weight decay would need every row: torch's error."""
    grad = -p.grad if maximize else p.grad
    if weight_decay != 0:
        grad = grad.add(p, alpha=weight_decay)   # (raises: sparse + dense)
    if momentum != 0:
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = grad.clone()
        elif buf.is_sparse:
            buf = (buf * momentum).add(grad, alpha=1 - dampening).coalesce()   # (an entry per row, however long)
        else:   # (a dense buffer from earlier dense steps stays dense)
            buf.mul_(momentum).add_(grad, alpha=1 - dampening)
        state["momentum_buffer"] = buf
        grad = (buf * momentum).add(grad) if nesterov else buf
    p.add_(grad, alpha=-lr)
