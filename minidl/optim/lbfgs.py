"""L-BFGS (``torch.optim.LBFGS``): a quasi-Newton method that builds its inverse-Hessian estimate from the
last ``history_size`` steps and gradient changes, several iterations (and closure calls) per ``step``.

The optional line search finds a step satisfying the strong Wolfe conditions by bracketing and zooming
with safeguarded cubic interpolation (Nocedal & Wright, algorithms 3.5 and 3.6, with minFunc's choices,
as PyTorch does), so that iterates agree with PyTorch's.
"""
from __future__ import annotations

import math

from .. import ops
from ..autograd import no_grad
from .optimizer import Optimizer, _call_closure, _check_non_negative


def _cubic_minimum(x1, f1, g1, x2, f2, g2, bounds=None):
    """Where the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2 has its minimum, clipped to
    ``bounds`` (by default the interval between the points); the bounds' midpoint if it has none."""
    low, high = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    discriminant = d1 * d1 - g1 * g2
    if discriminant < 0:
        return (low + high) / 2.0
    d2 = math.sqrt(discriminant)
    if x1 > x2:  # the formula measures from the right-hand point
        (x1, g1), (x2, g2) = (x2, g2), (x1, g1)
    minimum = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    return min(max(minimum, low), high)


def _strong_wolfe(evaluate, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """A step ``t`` along ``d`` with sufficient decrease (``c1``) and a small enough slope (``c2``).

    ``evaluate(t)`` returns the loss and flat gradient at ``x + t d``; ``f``, ``g``, ``gtd`` are the loss,
    gradient and slope at ``x``. Returns (loss, gradient, t, number of evaluations).
    """
    d_norm = d.abs().max().item()
    # a trial point: [t, loss, gradient, slope]
    prev = [0.0, f, g, gtd]
    new = [t, *evaluate(t)]
    new.append(new[2].dot(d).item())
    evals, trials = 1, 0

    def armijo_fails(point):
        return point[1] > f + c1 * point[0] * gtd

    # 1. grow the step until an interval is known to hold an acceptable one
    bracket, done = None, False
    while trials < max_ls:
        if armijo_fails(new) or (trials > 1 and new[1] >= prev[1]):
            bracket = [prev, new]
            break
        if abs(new[3]) <= -c2 * gtd:
            bracket, done = [new], True
            break
        if new[3] >= 0:  # the slope turned: the minimum lies behind
            bracket = [prev, new]
            break
        t_next = _cubic_minimum(prev[0], prev[1], prev[3], new[0], new[1], new[3],
                                bounds=(new[0] + 0.01 * (new[0] - prev[0]), new[0] * 10))
        prev = new
        new = [t_next, *evaluate(t_next)]
        new.append(new[2].dot(d).item())
        evals += 1
        trials += 1
    if trials == max_ls:
        bracket = [[0.0, f, g, gtd], new]

    # 2. shrink the interval until a point in it satisfies both conditions
    low, high = (0, 1) if bracket[0][1] <= bracket[-1][1] else (1, 0)
    stalled = False
    while not done and trials < max_ls:
        t_low, t_high = min(bracket[0][0], bracket[1][0]), max(bracket[0][0], bracket[1][0])
        if (t_high - t_low) * d_norm < tolerance_change:
            break
        t = _cubic_minimum(*bracket[0][:2], bracket[0][3], *bracket[1][:2], bracket[1][3])
        # a trial too close to an end twice running (or outside) moves a tenth of the interval inwards
        margin = 0.1 * (t_high - t_low)
        if min(t_high - t, t - t_low) < margin:
            if stalled or t >= t_high or t <= t_low:
                t = t_high - margin if abs(t - t_high) < abs(t - t_low) else t_low + margin
                stalled = False
            else:
                stalled = True
        else:
            stalled = False
        new = [t, *evaluate(t)]
        new.append(new[2].dot(d).item())
        evals += 1
        trials += 1
        if armijo_fails(new) or new[1] >= bracket[low][1]:
            bracket[high] = new
            low, high = (0, 1) if bracket[0][1] <= bracket[1][1] else (1, 0)
            continue
        if abs(new[3]) <= -c2 * gtd:
            done = True
        elif new[3] * (bracket[high][0] - bracket[low][0]) >= 0:
            bracket[high] = bracket[low]
        bracket[low] = new
    t, loss, grad, _ = bracket[low]
    return loss, grad, t, evals


class LBFGS(Optimizer):
    """L-BFGS over all parameters as one flat vector; ``step`` needs a closure that recomputes the loss.

    Its state (history, last direction and step) lives under the first parameter, as in PyTorch, so
    ``state_dict`` carries it. One parameter group only.
    """

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7, tolerance_change=1e-9,
                 history_size=100, line_search_fn=None):
        _check_non_negative(lr=lr)
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                        tolerance_change=tolerance_change, history_size=history_size,
                        line_search_fn=line_search_fn)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")

    @property
    def _params(self):
        return self.param_groups[0]["params"]

    def _flat_grad(self):
        return ops.cat([(p.grad.to_dense() if p.grad.is_sparse else p.grad).reshape(-1) if p.grad is not None
                        else ops.zeros(p.numel(), dtype=p.dtype, device=p.device) for p in self._params])

    def _move(self, t, direction) -> None:
        """params += t * direction, the flat direction cut into each parameter's shape."""
        offset = 0
        for p in self._params:
            n = p.numel()
            p.add_(direction[offset:offset + n].reshape(p.shape), alpha=t)
            offset += n

    def _loss_and_grad(self, closure):
        return float(_call_closure(closure)), self._flat_grad()

    @staticmethod
    def _direction(grad, old_dirs, old_stps, ro, h_diag):
        """-H grad by the two-loop recursion, H the inverse Hessian that the history implies."""
        q = grad.neg()
        alphas = [0.0] * len(old_dirs)
        for i in reversed(range(len(old_dirs))):
            alphas[i] = old_stps[i].dot(q).item() * ro[i]
            q.add_(old_dirs[i], alpha=-alphas[i])
        r = q * h_diag
        for i in range(len(old_dirs)):
            beta = old_dirs[i].dot(r).item() * ro[i]
            r.add_(old_stps[i], alpha=alphas[i] - beta)
        return r

    def step(self, closure):
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]
        if line_search_fn not in (None, "strong_wolfe"):
            raise RuntimeError(f"only 'strong_wolfe' is supported as line_search_fn, got {line_search_fn!r}")
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with no_grad():
            orig_loss = _call_closure(closure)
            loss, flat_grad = float(orig_loss), self._flat_grad()
            evals = 1
            state["func_evals"] += 1
            if flat_grad.abs().max().item() <= tolerance_grad:
                return orig_loss
            d, t = state.get("d"), state.get("t")
            old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
            h_diag, prev_flat_grad, prev_loss = state.get("H_diag"), state.get("prev_flat_grad"), state.get("prev_loss")
            for n_iter in range(1, max_iter + 1):
                state["n_iter"] += 1
                if state["n_iter"] == 1:
                    d = flat_grad.neg()
                    old_dirs, old_stps, ro, h_diag = [], [], [], 1.0
                else:
                    y = flat_grad - prev_flat_grad
                    s = d * t
                    ys = y.dot(s).item()
                    if ys > 1e-10:  # keep only pairs that keep the estimate positive definite
                        if len(old_dirs) == history_size:
                            del old_dirs[0], old_stps[0], ro[0]
                        old_dirs.append(y)
                        old_stps.append(s)
                        ro.append(1.0 / ys)
                        h_diag = ys / y.dot(y).item()
                    d = self._direction(flat_grad, old_dirs, old_stps, ro, h_diag)
                if prev_flat_grad is None:
                    prev_flat_grad = flat_grad.clone()
                else:
                    prev_flat_grad.copy_(flat_grad)
                prev_loss = loss
                # the very first step is kept short: the gradient's scale says nothing of the curvature
                t = min(1.0, 1.0 / flat_grad.abs().sum().item()) * lr if state["n_iter"] == 1 else lr
                gtd = flat_grad.dot(d).item()
                if gtd > -tolerance_change:  # not a descent direction any more
                    break
                if line_search_fn is not None:
                    start = [p.clone() for p in self._params]

                    def evaluate(trial_t):
                        self._move(trial_t, d)
                        out = self._loss_and_grad(closure)
                        for p, x in zip(self._params, start):
                            p.copy_(x)
                        return out

                    # PyTorch leaves the line search's own tolerance_change at its default
                    loss, flat_grad, t, ls_evals = _strong_wolfe(evaluate, t, d, loss, flat_grad, gtd,
                                                                 max_ls=max_eval - evals)
                    self._move(t, d)
                elif n_iter != max_iter:
                    self._move(t, d)
                    loss, flat_grad = self._loss_and_grad(closure)
                    ls_evals = 1
                else:  # the last iteration does not pay for an evaluation nobody reads
                    self._move(t, d)
                    ls_evals = 0
                evals += ls_evals
                state["func_evals"] += ls_evals
                if (evals >= max_eval or flat_grad.abs().max().item() <= tolerance_grad
                        or (d * t).abs().max().item() <= tolerance_change
                        or abs(loss - prev_loss) < tolerance_change):
                    break
            state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                         prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss
