"""``generate`` for the decoder language models, as transformers' ``GenerationMixin.generate`` decodes: greedy or
sampled (temperature, then top-k, then top-p, as its logits warpers apply them), one token a step over a
:class:`~minidl.models.cache.DynamicCache` (or the whole sequence again a step with ``use_cache=False``), left padding
through ``attention_mask`` (positions counted over the tokens only), sequences finished by an end-of-sequence token
padded with ``pad_token_id`` until all are done."""
from __future__ import annotations

import minidl

from .cache import DynamicCache

__all__ = ["GenerationMixin"]


def warp(scores, temperature: float, top_k: int, top_p: float):
    """The next-token scores (batch, vocab) a sampler draws from: divided by ``temperature``; all but the ``top_k``
    best set to -inf; then all but the smallest set of best tokens whose probability reaches ``top_p`` (never fewer
    than one)."""
    if temperature <= 0:
        raise ValueError(f"generate: temperature must be a strictly positive float, got {temperature}")
    if not 0.0 <= top_p <= 1.0:
        raise ValueError(f"generate: top_p must be a float between 0 and 1, got {top_p}")
    if temperature != 1.0:
        scores = scores / temperature
    if top_k and top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = scores.sort(dim=-1)                        # ascending, as transformers' warper sorts
        drop = ordered.softmax(-1).cumsum(-1) <= 1 - top_p
        drop[..., -1] = False                                        # keep the best token whatever top_p is
        scores = scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return scores


class GenerationMixin:
    """``generate`` for a model whose forward takes ``input_ids``, ``attention_mask``, ``position_ids``, ``cache``
    and ``use_cache`` and returns ``logits`` (batch, tokens, vocab) and the ``cache``."""

    def generate(self, input_ids, attention_mask=None, *, max_new_tokens: int | None = None, max_length: int = 20,
                 do_sample: bool = False, temperature: float = 1.0, top_k: int = 50, top_p: float = 1.0,
                 eos_token_id=None, pad_token_id=None, use_cache: bool = True, generator=None):
        """``input_ids`` (batch, tokens) continued by ``max_new_tokens`` tokens (else up to ``max_length`` in
        all); returns the (batch, tokens + new) ids. Sampling draws from ``generator`` (minidl's default one when
        None). ``eos_token_id`` (an id or a list; the config's by default) ends a sequence; it is then padded with
        ``pad_token_id`` (the config's, else the first end-of-sequence id)."""
        if input_ids.ndim != 2:
            raise ValueError(f"generate: input_ids must be (batch, tokens), got {list(input_ids.shape)}")
        steps = max_new_tokens if max_new_tokens is not None else max_length - input_ids.shape[1]
        eos = eos_token_id if eos_token_id is not None else self.config.eos_token_id
        eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        pad = pad_token_id if pad_token_id is not None else self.config.pad_token_id
        pad = pad if pad is not None else (eos[0] if eos else 0)
        mask = attention_mask if attention_mask is not None else minidl.ones_like(input_ids)
        positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
        sequences, cache = input_ids, DynamicCache() if use_cache else None
        done = minidl.zeros(input_ids.shape[0], dtype=minidl.bool, device=input_ids.device)
        step_ids, step_positions = input_ids, positions
        with minidl.no_grad():
            for _ in range(max(steps, 0)):
                out = self(step_ids, attention_mask=mask, position_ids=step_positions, cache=cache,
                           use_cache=use_cache)
                scores = out.logits[:, -1, :].float()
                if do_sample:
                    probs = warp(scores, temperature, top_k, top_p).softmax(-1)
                    token = minidl.multinomial(probs, 1, generator=generator).squeeze(1)
                else:
                    token = scores.argmax(-1)
                token = minidl.where(done, minidl.full_like(token, pad), token)
                sequences = minidl.cat([sequences, token[:, None]], dim=1)
                for stop in eos:
                    done = done | (token == stop)
                mask = minidl.cat([mask, minidl.ones_like(mask[:, :1])], dim=1)
                positions = minidl.cat([positions, positions[:, -1:] + 1], dim=1)
                if bool(done.all()):
                    break
                if use_cache:
                    cache = out.cache
                    step_ids, step_positions = token[:, None], positions[:, -1:]
                else:
                    step_ids, step_positions = sequences, positions
        return sequences
