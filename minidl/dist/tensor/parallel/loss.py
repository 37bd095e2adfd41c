"""loss_parallel(): cross-entropy on logits split by class, without gathering them (torch's)."""
from __future__ import annotations

import contextlib

from .._rules import loss_parallel as _rule

__all__ = ["loss_parallel"]


@contextlib.contextmanager
def loss_parallel():
    """Inside, F.cross_entropy / nn.CrossEntropyLoss (and nll_loss on log-probabilities) take DTensor logits
    split on the class dimension (dimension 1; a ColwiseParallel head's output with use_local_output=False,
    viewed as (rows, classes)) and compute the loss with three all-reduces of one number per row, never the
    logits whole. The targets may be a plain tensor (taken as whole) or a replicated DTensor; class weights,
    ignore_index, label_smoothing and every reduction work. The loss is a replicated DTensor; its backward
    needs no message (and, unlike torch's, may run outside the block)."""
    token = _rule.active.set(True)
    try:
        yield
    finally:
        _rule.active.reset(token)
