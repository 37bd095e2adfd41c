"""The running batch of a :class:`~minidl.serve.continuous.ContinuousBatcher`, in the two ways a model can decode it.

:class:`CachedBatch`, for a model whose forward takes a cache (minidl's GPT-2 and LLaMA): each request is prefilled
alone, then its keys and values join the batch's one cache, every sequence left-padded to the longest with zeros that
the attention mask hides, positions counted over real tokens only (as generate counts them), so that a step feeds one
token a sequence. :class:`RecomputedBatch`, for a model whose forward takes token ids only (the examples' char-GPT):
each step runs the whole sequences again, right-padded (causal attention never looks right, so padding there changes
no real token's logits), optionally only their last ``window`` tokens."""
from __future__ import annotations

import minidl
from minidl.models.cache import DynamicCache

__all__ = ["CachedBatch", "RecomputedBatch"]


def _next_scores(logits):
    """The last position's scores, in float32 as generate reads them."""
    return logits[:, -1, :].float()


def _left_pad(tensor, length: int):
    """``tensor`` (batch, ..., tokens[, head_dim]) with zeros before its tokens up to ``length`` of them."""
    dim = 2 if tensor.ndim == 4 else 1
    missing = length - tensor.shape[dim]
    if not missing:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return minidl.cat([minidl.zeros(*shape, dtype=tensor.dtype, device=tensor.device), tensor], dim=dim)


class CachedBatch:
    """Rows (requests, in batch order), their cache and their (rows, tokens) attention mask."""

    def __init__(self, device):
        self.device = device
        self.rows: list = []
        self.cache = self.mask = None

    def prefill(self, model, request):
        """The first scores (1, vocab) of ``request``'s prompt, its keys and values kept until :meth:`join`."""
        ids = minidl.tensor([request.prompt], device=self.device)
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        request.cache = out.cache
        return _next_scores(out.logits)

    def join(self, requests) -> None:
        """Add prefilled requests to the batch, everything left-padded to the longest sequence."""
        parts = [(self.cache, self.mask)] if self.rows else []
        for request in requests:
            tokens = request.cache.get_seq_length()
            parts.append((request.cache, minidl.ones(1, tokens, dtype=minidl.long, device=self.device)))
            del request.cache
        length = max(mask.shape[1] for _, mask in parts)
        layers = zip(*(list(cache) for cache, _ in parts))
        self.cache = DynamicCache([(minidl.cat([_left_pad(keys, length) for keys, _, _ in layer]),
                                    minidl.cat([_left_pad(values, length) for _, values, _ in layer]))
                                   for layer in layers])
        self.mask = minidl.cat([_left_pad(mask, length) for _, mask in parts])
        self.rows += requests

    def keep(self, kept: list[bool]) -> None:
        """Keep the rows ``kept`` marks, then drop the padding columns all of them share."""
        if not any(kept):
            self.rows, self.cache, self.mask = [], None, None
            return
        index = minidl.tensor([i for i, k in enumerate(kept) if k], device=self.device)
        self.rows = [row for row, k in zip(self.rows, kept) if k]
        self.cache.batch_select_indices(index)
        self.mask = self.mask[index]
        lead = int((self.mask.cumsum(-1) == 0).sum(-1).min())
        if lead:
            self.cache = DynamicCache([(keys[:, :, lead:], values[:, :, lead:]) for keys, values, _ in self.cache])
            self.mask = self.mask[:, lead:]

    def decode(self, model):
        """Feed each row its last token; the next scores (rows, vocab)."""
        ids = minidl.tensor([[row.generated[-1]] for row in self.rows], device=self.device)
        positions = minidl.tensor([[len(row.prompt) + len(row.generated) - 1] for row in self.rows],
                                  device=self.device)
        self.mask = minidl.cat([self.mask, minidl.ones_like(self.mask[:, :1])], dim=1)
        out = model(input_ids=ids, attention_mask=self.mask, position_ids=positions, cache=self.cache,
                    use_cache=True, logits_to_keep=1)
        self.cache = out.cache
        return _next_scores(out.logits)


class RecomputedBatch:
    """Rows (requests, in batch order) whose whole sequences (their last ``window`` tokens) run every step."""

    def __init__(self, device, window: int | None):
        self.device, self.window = device, window
        self.rows: list = []

    def prefill(self, model, request):
        return self._scores(model, [request.prompt])

    def join(self, requests) -> None:
        self.rows += requests

    def keep(self, kept: list[bool]) -> None:
        self.rows = [row for row, k in zip(self.rows, kept) if k]

    def decode(self, model):
        return self._scores(model, [row.prompt + row.generated for row in self.rows])

    def _scores(self, model, sequences):
        """The scores after each sequence's last token, the sequences right-padded with zeros into one forward."""
        sequences = [s[-self.window:] if self.window else s for s in sequences]
        length = max(map(len, sequences))
        ids = minidl.tensor([s + [0] * (length - len(s)) for s in sequences], device=self.device)
        out = model(ids)
        logits = out if isinstance(out, minidl.Tensor) else out.logits
        last = minidl.tensor([len(s) - 1 for s in sequences], device=self.device)
        return logits[minidl.arange(len(sequences), device=self.device), last].float()
