"""The training losses of the Hugging Face models, as transformers' ``loss_function`` computes them."""
from __future__ import annotations

import minidl
from minidl.nn import functional as F

__all__ = ["causal_lm_loss"]


def causal_lm_loss(logits, labels, ignore_index: int = -100):
    """Next-token cross entropy: the logits at token i scored against ``labels`` at token i + 1 (so ``labels`` may be
    the input ids themselves), averaged over the labels that are not ``ignore_index``. Half-precision logits are
    scored in float32 (float64 ones stay float64)."""
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"labels must be (batch, tokens) as the input, {list(logits.shape[:-1])}; got "
                         f"{list(labels.shape)}")
    if logits.dtype in (minidl.float16, minidl.bfloat16):
        logits = logits.float()
    vocab = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1).to(logits.device),
                           ignore_index=ignore_index)
