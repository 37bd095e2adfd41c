"""A ``POST /v1/generate`` body to the settings the continuous batcher takes, every field checked here so that a bad
request is refused (an ``InputError`` naming the field) before it reaches the model."""
from __future__ import annotations

import dataclasses
import json
import math
import numbers

from .inputs import InputError, json_object

__all__ = ["GenerateRequest", "parse_generate"]

FIELDS = ("input_ids", "prompt", "max_tokens", "temperature", "top_k", "top_p", "stop", "stream", "seed")


@dataclasses.dataclass
class GenerateRequest:
    prompt: list
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    stop_token_ids: list | None     # None: the model's end-of-sequence ids only
    stop_sequences: list
    seed: int | None
    stream: bool


def parse_generate(body: bytes, *, tokenizer, vocab_size: int, max_total: int | None) -> GenerateRequest:
    """The request in ``body``. ``tokenizer`` (None: text is refused) encodes a ``prompt`` and ``stop`` strings;
    ``max_total`` bounds prompt plus new tokens (None: only the model's positions do)."""
    data = json_object(body)
    unknown = [name for name in data if name not in FIELDS]
    if unknown:
        raise InputError(422, f"unknown field(s) {', '.join(map(repr, unknown))} (known: {', '.join(FIELDS)})")
    prompt = _prompt(data, tokenizer, vocab_size)
    max_tokens = _integer(data, "max_tokens", 16, least=1)
    if max_total is not None and len(prompt) + max_tokens > max_total:
        raise InputError(422, f"{len(prompt)} prompt tokens and max_tokens={max_tokens} make "
                              f"{len(prompt) + max_tokens}, over this server's limit of {max_total} tokens")
    temperature = _real(data, "temperature", 0.0)
    if temperature < 0:
        raise InputError(422, f"temperature must be >= 0 (0: greedy), got {temperature}")
    top_p = _real(data, "top_p", 1.0)
    if not 0 < top_p <= 1:
        raise InputError(422, f"top_p must be in (0, 1], got {top_p}")
    stop_ids, stop_texts = _stop(data.get("stop"), tokenizer, vocab_size)
    stream = data.get("stream", True)
    if not isinstance(stream, bool):
        raise InputError(422, f"stream must be true or false, got {json.dumps(stream)[:60]}")
    seed = data.get("seed")
    if seed is not None:
        seed = _integer(data, "seed", None, least=0)
    return GenerateRequest(prompt, max_tokens, temperature, _integer(data, "top_k", 0, least=0), top_p,
                           stop_ids, stop_texts, seed, stream)


def _prompt(data: dict, tokenizer, vocab_size: int) -> list:
    if ("input_ids" in data) == ("prompt" in data):
        raise InputError(422, 'body needs exactly one of "input_ids" (token ids) and "prompt" (text)')
    if "prompt" in data:
        text = data["prompt"]
        if not isinstance(text, str):
            raise InputError(422, f'"prompt" must be a string (token ids go in "input_ids"), got '
                                  f"{json.dumps(text)[:60]}")
        ids = _encode(text, tokenizer, "prompt")
    else:
        ids = data["input_ids"]
        if not isinstance(ids, list) or not all(_is_int(t) for t in ids):
            raise InputError(422, f'"input_ids" must be a list of integer token ids, got {json.dumps(ids)[:60]}')
    if not ids:
        raise InputError(422, "the prompt holds no tokens")
    _check_vocabulary(ids, vocab_size, "input_ids")
    return ids


def _stop(value, tokenizer, vocab_size: int) -> tuple:
    """``(stop token ids or None, stop sequences)``: an integer item is a token id that ends the output and is kept in
    it (as an end-of-sequence token is); a string item is text that ends it and is not (its tokens must come as the
    tokenizer encodes the string alone)."""
    if value is None:
        return None, []
    items = value if isinstance(value, list) else [value]
    ids = [item for item in items if _is_int(item)]
    texts = [item for item in items if isinstance(item, str)]
    if len(ids) + len(texts) != len(items):
        raise InputError(422, f'"stop" must be a token id, a string or a list of them, got {json.dumps(value)[:60]}')
    _check_vocabulary(ids, vocab_size, "stop")
    sequences = [_encode(text, tokenizer, "stop") for text in texts]
    if any(not s for s in sequences):
        raise InputError(422, '"stop" holds a string with no tokens')
    return (ids or None), sequences


def _encode(text: str, tokenizer, field: str) -> list:
    if tokenizer is None:
        raise InputError(400, f'"{field}" text needs a tokenizer and this model has none; send token ids '
                              f'("input_ids", or integer "stop" items)')
    try:
        return [int(t) for t in tokenizer.encode(text)]
    except Exception as error:   # (a tokenizer's own refusal, e.g. a character outside its alphabet)
        raise InputError(422, f'"{field}": the tokenizer cannot encode {text[:40]!r}: {error}') from None


def _check_vocabulary(ids: list, vocab_size: int, field: str) -> None:
    outside = [t for t in ids if not 0 <= t < vocab_size]
    if outside:
        raise InputError(422, f'"{field}": token id(s) {outside[:5]} outside the vocabulary [0, {vocab_size})')


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _integer(data: dict, name: str, default, *, least: int) -> int:
    value = data.get(name, default)
    if not _is_int(value) or value < least:
        raise InputError(422, f'"{name}" must be an integer >= {least}, got {json.dumps(value)[:60]}')
    return value


def _real(data: dict, name: str, default: float) -> float:
    value = data.get(name, default)
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        raise InputError(422, f'"{name}" must be a finite number, got {json.dumps(value)[:60]}')
    return float(value)
