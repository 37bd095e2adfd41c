"""``generate`` for the decoder language models, as transformers 5.24's ``GenerationMixin.generate`` decodes: greedy
or sampled (temperature, then top-k, then top-p, as its logits warpers apply them), one token a step over a
:class:`~minidl.models.cache.DynamicCache` (or the whole sequence again a step with ``use_cache=False``), only the last
position's logits computed, left padding through ``attention_mask`` (positions counted over the tokens only; without
a mask, the pad token's places when the prompt holds it), sequences finished by an end-of-sequence token padded with
``pad_token_id`` until all are done.

Its settings come, in this order of precedence, from generate's arguments, a ``generation_config`` passed to it, the
model's ``generation_config`` (what ``from_pretrained`` read from the folder: :func:`read_generation_config`) and
transformers' defaults, as transformers merges them."""
from __future__ import annotations

import json
import os

import minidl

from .cache import DynamicCache

__all__ = ["GenerationConfig", "GenerationMixin", "keep_positions", "read_generation_config", "sample", "warp"]

# the settings generate computes, with transformers' defaults for them (GenerationConfig._get_default_generation_params)
DEFAULTS = {"max_length": 20, "max_new_tokens": None, "do_sample": False, "temperature": 1.0, "top_k": 50,
            "top_p": 1.0, "use_cache": True, "eos_token_id": None, "pad_token_id": None, "bos_token_id": None}


# the settings generate does not compute -> whether a value of one changes what transformers' generate returns, given
# the merged settings and the prompt's length (as its _get_logits_processor, stopping criteria and modes read them)
UNSUPPORTED = {
    "num_beams": lambda v, s, n: v > 1,
    "num_beam_groups": lambda v, s, n: v > 1,
    "num_return_sequences": lambda v, s, n: v > 1,
    "min_length": lambda v, s, n: v > n and s.eos_token_id is not None,
    "min_new_tokens": lambda v, s, n: v > 0 and s.eos_token_id is not None,
    "repetition_penalty": lambda v, s, n: v != 1.0,
    "no_repeat_ngram_size": lambda v, s, n: v > 0,
    "guidance_scale": lambda v, s, n: v != 1,
    "typical_p": lambda v, s, n: s.do_sample and v < 1.0,
    "min_p": lambda v, s, n: s.do_sample,
    "top_h": lambda v, s, n: s.do_sample,
    "epsilon_cutoff": lambda v, s, n: s.do_sample and 0.0 < v < 1.0,
    "eta_cutoff": lambda v, s, n: s.do_sample and 0.0 < v < 1.0,
    "penalty_alpha": lambda v, s, n: not s.do_sample and v > 0 and s.top_k > 1,   # contrastive search
    "remove_invalid_values": lambda v, s, n: v is True,
    "token_healing": lambda v, s, n: bool(v),
    "return_dict_in_generate": lambda v, s, n: bool(v),
    **dict.fromkeys(("bad_words_ids", "forced_bos_token_id", "forced_eos_token_id", "exponential_decay_length_penalty",
                     "suppress_tokens", "begin_suppress_tokens", "sequence_bias", "stop_strings", "max_time",
                     "watermarking_config", "constraints", "force_words_ids", "dola_layers",
                     "prompt_lookup_num_tokens"), lambda v, s, n: True),
}


class GenerationConfig:
    """generate's settings, by transformers' names. A field is None until set, so that generate tells what the caller
    or the model's folder chose from transformers' defaults (an unset length, for one, means 20 new tokens capped by
    the model's positions); the other fields transformers has are kept as given, unread."""

    def __init__(self, **kwargs):
        for name in (*DEFAULTS, *UNSUPPORTED):
            setattr(self, name, kwargs.pop(name, None))
        self.__dict__.update(kwargs)

    @classmethod
    def from_model_config(cls, config: dict) -> GenerationConfig:
        """The settings a model config's fields give (its special token ids; the generation fields transformers 4 kept
        in config.json), as transformers' ``GenerationConfig.from_model_config`` takes them: None values and other
        fields dropped."""
        return cls(**{k: v for k, v in config.items() if (k in DEFAULTS or k in UNSUPPORTED) and v is not None})

    def __repr__(self):
        shown = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items() if v is not None)
        return f"GenerationConfig({shown})"


def read_generation_config(folder, config: dict) -> GenerationConfig:
    """generate's defaults for a model folder, as transformers' ``from_pretrained`` reads them: its
    ``generation_config.json``, else (a folder saved before transformers wrote one) the generation fields of
    ``config``, its config.json. Nothing is refused here: a folder whose settings generate cannot honour (beams, a
    repetition penalty) loads for its forward; generate refuses them when they would apply."""
    path = os.path.join(os.fspath(folder), "generation_config.json")
    if not os.path.isfile(path):
        return GenerationConfig.from_model_config(config)
    with open(path) as f:
        data = json.load(f)
    return GenerationConfig(**{k: v for k, v in data.items() if not k.startswith("_")})   # (_from_model_config)


def keep_positions(hidden_states, logits_to_keep):
    """The positions of (batch, tokens, hidden) whose logits a forward computes, as transformers' forwards slice them:
    the last ``logits_to_keep`` (an int; 0: all), or those a tensor of indices names."""
    if isinstance(logits_to_keep, int):
        return hidden_states[:, -logits_to_keep:]
    return hidden_states[:, logits_to_keep]


def warp(scores, temperature: float, top_k: int, top_p: float):
    """The next-token scores (batch, vocab) a sampler draws from: divided by ``temperature``; all but the ``top_k``
    best set to -inf (0: none); then all but the smallest set of best tokens whose probability reaches ``top_p``
    (never fewer than one)."""
    if temperature <= 0:
        raise ValueError(f"generate: temperature must be a strictly positive float, got {temperature}")
    if top_k and (not isinstance(top_k, int) or top_k < 0):
        raise ValueError(f"generate: top_k has to be a strictly positive integer (or 0: no top-k), but is {top_k}")
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


def sample(scores, temperature: float, top_k: int, top_p: float, generator=None):
    """One token a row of ``scores`` (batch, vocab), drawn with ``generator`` (minidl's default one when None) from
    the softmax of the scores :func:`warp` gives."""
    probs = warp(scores, temperature, top_k, top_p).softmax(-1)
    return minidl.multinomial(probs, 1, generator=generator).squeeze(1)


class GenerationMixin:
    """``generate`` for a model whose forward takes ``input_ids``, ``attention_mask``, ``position_ids``, ``cache``,
    ``use_cache`` and ``logits_to_keep`` and returns ``logits`` (batch, tokens, vocab) and the ``cache``.

    ``positions_field``: the config field bounding the positions a model embeds (GPT-2's learned ``n_positions``), a
    prompt and its new tokens checked against it up front; None where positions are unbounded (rotary ones), the
    config's ``max_position_embeddings`` then capping the default length only, as transformers caps it."""
    positions_field: str | None = None

    @property
    def generation_config(self) -> GenerationConfig:
        """generate's defaults: the folder's (set by ``from_pretrained``), else, for a model built from a config, the
        config's special token ids, as transformers derives them."""
        if self.__dict__.get("_generation_config") is None:
            self.__dict__["_generation_config"] = GenerationConfig.from_model_config(vars(self.config))
        return self.__dict__["_generation_config"]

    @generation_config.setter
    def generation_config(self, value: GenerationConfig) -> None:
        if not isinstance(value, GenerationConfig):
            raise TypeError(f"generation_config must be a minidl.models.generation.GenerationConfig, got "
                            f"{type(value).__name__}")
        self.__dict__["_generation_config"] = value

    def generate(self, input_ids, attention_mask=None, generation_config: GenerationConfig | None = None, *,
                 max_new_tokens: int | None = None, max_length: int | None = None, do_sample: bool | None = None,
                 temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                 eos_token_id=None, pad_token_id=None, use_cache: bool | None = None, generator=None, **kwargs):
        """``input_ids`` (batch, tokens) continued by ``max_new_tokens`` tokens (else up to ``max_length`` in all;
        neither: 20 new tokens, at most the model's positions); returns the (batch, tokens + new) ids. An argument
        left None takes ``generation_config``'s value, else the model's ``generation_config``'s, else transformers'
        default; ``kwargs``: other transformers generation settings (e.g. ``num_beams=1`` to override a folder's
        beams), refused where generate would have to compute them. Sampling draws from ``generator`` (minidl's
        default one when None). ``eos_token_id`` (an id or a list) ends a sequence; it is then padded with
        ``pad_token_id`` (else the first end-of-sequence id). Without ``attention_mask``, a prompt holding the pad
        token (one that is no end-of-sequence id) is masked there, as transformers infers it."""
        if input_ids.ndim != 2:
            raise ValueError(f"generate: input_ids must be (batch, tokens), got {list(input_ids.shape)}")
        unknown = sorted(set(kwargs) - set(DEFAULTS) - set(UNSUPPORTED))
        if unknown:
            raise TypeError(f"generate: unexpected argument(s) {', '.join(unknown)} (not transformers generation "
                            f"settings minidl knows)")
        given = dict(max_new_tokens=max_new_tokens, max_length=max_length, do_sample=do_sample,
                     temperature=temperature, top_k=top_k, top_p=top_p, eos_token_id=eos_token_id,
                     pad_token_id=pad_token_id, use_cache=use_cache)
        layers = [DEFAULTS, vars(self.generation_config), vars(generation_config or GenerationConfig()), given]
        default_length = all(layer.get("max_length") is None for layer in layers[1:])
        # kwargs set what they name even to None, as transformers' generate kwargs do (bad_words_ids=None: none)
        settings = GenerationConfig(**{k: v for layer in layers for k, v in layer.items() if v is not None} | kwargs)
        prompt = input_ids.shape[1]
        for name, applies in UNSUPPORTED.items():
            value = getattr(settings, name)
            if value is not None and applies(value, settings, prompt):
                raise ValueError(f"generate: {name}={value!r} is not supported (minidl's generate decodes greedily or "
                                 f"samples with temperature, top_k and top_p); if the model's folder set it, give "
                                 f"generate a value that changes nothing ({name}=None does) or set "
                                 f"model.generation_config.{name} = None")
        new = self._new_tokens(settings, prompt, default_length)
        eos = [] if settings.eos_token_id is None else minidl.as_tensor(settings.eos_token_id).flatten().tolist()
        pad = settings.pad_token_id if settings.pad_token_id is not None else (eos[0] if eos else None)
        mask = attention_mask
        if mask is None:
            inferable = pad is not None and pad not in eos and bool((input_ids == pad).any())
            mask = (input_ids != pad).long() if inferable else minidl.ones_like(input_ids)
        self._check_positions(int(mask.long().sum(-1).max()), new)
        positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
        sequences, cache = input_ids, DynamicCache() if settings.use_cache else None
        done = minidl.zeros(input_ids.shape[0], dtype=minidl.bool, device=input_ids.device)
        step_ids, step_positions = input_ids, positions
        with minidl.no_grad():
            for _ in range(new):
                out = self(step_ids, attention_mask=mask, position_ids=step_positions, cache=cache,
                           use_cache=settings.use_cache, logits_to_keep=1)
                scores = out.logits[:, -1, :].float()
                if settings.do_sample:
                    token = sample(scores, settings.temperature, settings.top_k, settings.top_p, generator)
                else:
                    token = scores.argmax(-1)
                if eos:
                    token = minidl.where(done, minidl.full_like(token, pad), token)
                sequences = minidl.cat([sequences, token[:, None]], dim=1)
                for stop in eos:
                    done = done | (token == stop)
                mask = minidl.cat([mask, minidl.ones_like(mask[:, :1])], dim=1)
                positions = minidl.cat([positions, positions[:, -1:] + 1], dim=1)
                if bool(done.all()):
                    break
                if settings.use_cache:
                    cache = out.cache
                    step_ids, step_positions = token[:, None], positions[:, -1:]
                else:
                    step_ids, step_positions = sequences, positions
        return sequences

    def _new_tokens(self, settings: GenerationConfig, prompt: int, default_length: bool) -> int:
        """How many tokens to generate, as transformers' _prepare_generated_length and _validate_generated_length
        decide: ``max_new_tokens``; else ``max_length`` less the prompt; neither set anywhere: 20, the total capped by
        the model's positions."""
        if settings.max_new_tokens is not None:
            if settings.max_new_tokens <= 0:
                raise ValueError(f"generate: max_new_tokens must be greater than 0, but is {settings.max_new_tokens}")
            return settings.max_new_tokens
        total = settings.max_length
        if default_length:
            total += prompt
            cap = getattr(self.config, self.positions_field or "max_position_embeddings", None)
            total = total if cap is None else min(total, cap)
        if prompt >= total:
            raise ValueError(f"generate: input length of input_ids is {prompt}, but max_length is set to {total}; "
                             f"increase max_length or, better, set max_new_tokens")
        return total - prompt

    def _check_positions(self, prompt_tokens: int, new: int) -> None:
        """Refuse, up front, a generation needing positions beyond ``positions_field`` (the last new token is never
        fed back: ``prompt_tokens + new - 1`` positions, the padding not counted)."""
        if self.positions_field is None:
            return
        limit, needed = getattr(self.config, self.positions_field), prompt_tokens + new - 1
        if needed > limit:
            raise ValueError(f"generate: {prompt_tokens} prompt tokens and {new} new ones need {needed} positions, "
                             f"beyond {type(self).__name__}'s {self.positions_field}={limit} (at most "
                             f"{limit - prompt_tokens + 1} new tokens fit)")
