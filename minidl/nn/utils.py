"""nn.utils: gradient clipping and parameter/vector conversion."""
from __future__ import annotations

import math

import minidl
from minidl import Tensor, _tracing


def _with_grads(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p for p in parameters if p.grad is not None]


def _grads(parameters):
    return [p.grad for p in _with_grads(parameters)]


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None):
    """Scale all gradients together so that their joint norm is at most max_norm; returns the norm.
    A sparse gradient counts by its coalesced values (the entries it really holds, repeats summed;
    torch 2.13 raises on one instead). With ``foreach`` (the default where it applies: dense gradients,
    norm_type > 0 or inf) the gradients of each device and dtype are measured in one kernel launch and
    scaled in another, instead of a few ops per gradient. Under minidl.compile it is a host step (it reads
    the norm on the host to skip the scaling): a captured call measures and scales again at every replay."""
    parameters = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return _tracing.host_step(lambda: _clip_grad_norm(parameters, max_norm, norm_type, error_if_nonfinite, foreach))


def _clip_grad_norm(parameters, max_norm, norm_type, error_if_nonfinite, foreach):
    params = _with_grads(parameters)
    max_norm, norm_type = float(max_norm), float(norm_type)
    if not params:
        return minidl.tensor(0.0)
    with minidl.no_grad():
        multi = _use_foreach(foreach, params, norm_type)
        grads = [_coalesced(p) if p.grad.is_sparse else p.grad for p in params]
        if multi:
            buckets = _by_device_dtype(grads)
            first = grads[0].device
            norms = minidl.cat([minidl._foreach_norm(b, norm_type).to(first) for b in buckets])
            total = norms.max() if norm_type == math.inf else norms.norm(norm_type)
        else:
            elements = [g._values() if g.is_sparse else g for g in grads]
            elements = [e for e in elements if e.numel()] or [minidl.zeros(1, device=grads[0].device)]   # (norm 0)
            if norm_type == math.inf:
                norms = [g.detach().abs().max() for g in elements]
                total = norms[0] if len(norms) == 1 else minidl.stack(norms).max()
            else:   # (a global tensor's norm, the same on every rank, is taken by its value)
                norms = [n if isinstance(n, Tensor) else minidl.tensor(float(n), dtype=n.dtype, device=n.device)
                         for n in (g.detach().norm(norm_type) for g in elements)]
                total = minidl.stack(norms).norm(norm_type)
        if error_if_nonfinite and not bool(total.isfinite()):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is "
                               "non-finite, so it cannot be clipped. To disable this error and scale the "
                               "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
        clip_coef = max_norm / (float(total) + 1e-6)
        if clip_coef < 1.0:
            if multi:
                for bucket in buckets:
                    minidl._foreach_mul_(bucket, clip_coef)
            else:
                for g in grads:
                    g.mul_(clip_coef)
    return total


def _use_foreach(foreach, params, norm_type) -> bool:
    """Whether clip_grad_norm_ measures and scales with the multi-tensor kernels (foreach=None: where
    they apply; True where they cannot is an error naming why)."""
    if foreach is False:
        return False
    why = ("sparse gradients" if any(p.grad.is_sparse for p in params) else
           "global (DTensor) gradients" if any(not isinstance(p.grad, Tensor) for p in params) else
           "gradients that are not floating point" if any(not p.grad.is_floating_point() for p in params) else
           f"norm_type={norm_type} (foreach takes norm_type > 0 or inf)" if not norm_type > 0 else None)
    if why and foreach:
        raise RuntimeError(f"clip_grad_norm_: foreach=True cannot handle {why}; pass foreach=None or False")
    return why is None


def _by_device_dtype(tensors) -> list:
    buckets: dict = {}
    for t in tensors:
        buckets.setdefault((t.device, t.dtype), []).append(t)
    return list(buckets.values())


def _coalesced(p):
    """p's sparse gradient, coalesced in place of the old (so scaling it scales what is summed)."""
    p.grad = p.grad.coalesce()
    return p.grad


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    clip_value = float(clip_value)
    with minidl.no_grad():
        for g in _grads(parameters):
            g.clamp_(min=-clip_value, max=clip_value)


def parameters_to_vector(parameters):
    return minidl.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters) -> None:
    pointer = 0
    with minidl.no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[pointer:pointer + n].view_as(p))
            pointer += n


def weight_penalty(parameters, p: int = 2):
    """Regularisation term: the sum over ``parameters`` of ``|w|`` (p=1, L1) or ``w**2`` (p=2, L2).

    Differentiable; add ``lam * weight_penalty(model.parameters(), p)`` to the loss. (L2 through the
    loss equals SGD's ``weight_decay=2*lam``; with Adam it differs from AdamW's decoupled decay.)
    """
    if p not in (1, 2):
        raise ValueError(f"weight_penalty: p must be 1 (L1) or 2 (L2), got {p}")
    terms = [(w.abs() if p == 1 else w * w).sum() for w in parameters]
    if not terms:
        raise ValueError("weight_penalty: got no parameters")
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total
