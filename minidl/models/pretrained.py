"""Hugging Face model folders, read as transformers' ``from_pretrained`` reads them: ``config.json`` for the
architecture, and the weights from ``model.safetensors``, a sharded folder (``model.safetensors.index.json`` naming
each tensor's shard) or a ``pytorch_model.bin`` (torch's zip format, through :func:`minidl.load`'s allow-list).

A model class declares the config fields it reads (with transformers' defaults) and the values it supports; a field
it does not know is refused by name, as is a value it cannot compute, so a checkpoint never loads into a network
that differs from the one it was trained as. Weights load strictly: every missing, unexpected or mis-shaped tensor
is named (tied weights excepted, as transformers ties them)."""
from __future__ import annotations

import importlib
import json
import os
import warnings

import minidl
from minidl import nn

from .generation import GenerationMixin, read_generation_config

__all__ = ["Config", "PreTrainedModel", "from_pretrained", "read_config", "read_weights"]

# what every transformers config may carry that changes nothing a forward computes here (fields starting with "_"
# are tools' bookkeeping, e.g. _name_or_path, _attn_implementation_autoset, and are skipped too)
INERT_FIELDS = frozenset({
    "architectures", "model_type", "transformers_version", "dtype", "torch_dtype", "use_cache", "output_past",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "initializer_range",
    "id2label", "label2id", "problem_type", "tie_word_embeddings", "finetuning_task", "tokenizer_class", "prefix",
    "task_specific_params", "chunk_size_feed_forward", "is_encoder_decoder", "add_cross_attention", "is_decoder",
    "cross_attention_hidden_size", "tie_encoder_decoder", "torchscript", "use_bfloat16", "classifier_dropout",
    "gradient_checkpointing", "keys_to_ignore_at_inference", "unsloth_version", "directionality", "pooler_fc_size",
    "pooler_num_attention_heads", "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type"})
# generate's defaults, which transformers 4 kept in config.json: read by generation.read_generation_config
GENERATION_FIELDS = frozenset({
    "max_length", "max_new_tokens", "min_length", "min_new_tokens", "do_sample", "num_beams", "num_beam_groups",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "early_stopping", "diversity_penalty",
    "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens", "output_scores", "return_dict_in_generate"})
# fields that would change what a forward returns or computes, allowed at their default values only
_OFF_BY_DEFAULT = {"output_hidden_states": False, "output_attentions": False, "return_dict": True,
                   "pruned_heads": {}}
_REGISTRY: dict = {}   # architecture name -> class; model_type -> its default class
FAMILIES = ("gpt2", "llama", "bert")   # the model types read here, each the submodule of its classes


class Config:
    """A model's configuration: the fields its class reads, from ``config.json`` over transformers' defaults."""

    def __init__(self, model_type: str, **fields):
        self.model_type = model_type
        self.__dict__.update(fields)

    def __repr__(self):
        shown = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items() if k != "model_type")
        return f"Config(model_type={self.model_type!r}, {shown})"


def read_config(folder) -> dict:
    """``config.json`` of a model folder, as a dict."""
    path = os.path.join(os.fspath(folder), "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"from_pretrained: {os.fspath(folder)!r} has no config.json (a Hugging Face model "
                                f"folder holds config.json and model.safetensors)")
    with open(path) as f:
        return json.load(f)


def read_weights(folder) -> dict:
    """name -> tensor of every weight in a model folder (one safetensors file, shards named by an index, or a
    ``pytorch_model.bin``)."""
    folder = os.fspath(folder)
    single, index = os.path.join(folder, "model.safetensors"), os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(single):
        return minidl.load(single, mmap=True)          # copied into the model, never held twice
    if os.path.isfile(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        state = {}
        for shard in dict.fromkeys(weight_map.values()):
            path = os.path.join(folder, shard)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"from_pretrained: {index} names shard {shard!r}, which is not in {folder!r}")
            state.update(minidl.load(path, mmap=True))
        missing = sorted(set(weight_map) - set(state))
        if missing:
            raise RuntimeError(f"from_pretrained: the shards of {folder!r} lack {', '.join(missing[:5])}"
                               f"{' ...' if len(missing) > 5 else ''} named by its index")
        return state
    if os.path.isfile(os.path.join(folder, "pytorch_model.bin")):
        return minidl.load(os.path.join(folder, "pytorch_model.bin"), mmap=True)
    raise FileNotFoundError(f"from_pretrained: {folder!r} has no weights (model.safetensors, "
                            f"model.safetensors.index.json with its shards, or pytorch_model.bin)")


def register(*architectures: str, default_for: str | None = None):
    """Class decorator: the transformers architecture names a class loads (and the model type it is the default
    class of, for configs that name no architecture)."""
    def add(cls):
        for name in architectures:
            _REGISTRY[name] = cls
        if default_for:
            _REGISTRY[default_for] = cls
        return cls
    return add


def from_pretrained(folder, **kwargs):
    """The model a Hugging Face folder holds, its class picked from the config's ``architectures`` (else its
    ``model_type``), as transformers' auto classes do; ``kwargs`` go to that class's ``from_pretrained``. An
    architecture minidl does not have (a classification head, say) is refused by name, not loaded without its head."""
    config = read_config(folder)
    model_type, architectures = config.get("model_type"), config.get("architectures") or []
    if model_type not in FAMILIES:
        raise ValueError(f"from_pretrained: {os.fspath(folder)!r} holds a {model_type!r} model; minidl.models reads "
                         f"{', '.join(FAMILIES)} models")
    importlib.import_module(f"minidl.models.{model_type}")   # (its classes register themselves)
    known = [name for name in architectures if name in _REGISTRY]
    if architectures and not known:
        raise ValueError(f"from_pretrained: {os.fspath(folder)!r} holds a {', '.join(architectures)}, which "
                         f"minidl.models lacks (it has {', '.join(sorted(k for k in _REGISTRY if k not in FAMILIES))}"
                         f"); a base model class (e.g. {_REGISTRY[model_type].__name__}.from_pretrained) reads its "
                         f"body without the head")
    return _REGISTRY[known[0] if known else model_type].from_pretrained(folder, **kwargs)


class PreTrainedModel(nn.Module):
    """What the Hugging Face models share: reading a folder into a config and weights.

    A subclass sets ``model_type``, ``config_fields`` (field -> transformers' default), ``check_config`` (refusing
    values it cannot compute), ``base_model_prefix`` (the name of its base model inside a task model, e.g.
    ``"transformer"``), ``tied`` (weight name -> the name it is tied to when ``tie_word_embeddings``), and, where
    transformers' checkpoints of one family share a folder layout across task models, ``unused`` (prefixes of
    checkpoint weights the class does not compute with, e.g. another task's head: dropped) and ``fresh`` (its own
    weights a checkpoint may lack, e.g. a head the base model's folder has not: left at their initialisation, with a
    warning naming them, as transformers leaves them)."""
    model_type = ""
    config_fields: dict = {}
    base_model_prefix = ""
    tied: dict = {}
    unused: tuple = ()
    fresh: tuple = ()

    @classmethod
    def config_from_dict(cls, data: dict) -> Config:
        if data.get("model_type", cls.model_type) != cls.model_type:
            raise ValueError(f"{cls.__name__}: the config is of model type {data['model_type']!r}, not "
                             f"{cls.model_type!r}")
        unknown = sorted(k for k in set(data) - set(cls.config_fields) - INERT_FIELDS - GENERATION_FIELDS
                         if not k.startswith("_"))
        changed = [f"{k}={data[k]!r}" for k, default in _OFF_BY_DEFAULT.items() if data.get(k, default) != default]
        if changed:
            raise ValueError(f"{cls.__name__}: config {', '.join(changed)} is not supported (minidl's models return "
                             f"the last hidden state and logits only, with every head kept)")
        if unknown:
            raise ValueError(f"{cls.__name__}: config field(s) {', '.join(map(repr, unknown))} are not supported "
                             f"by minidl's {cls.model_type} (it reads {', '.join(sorted(cls.config_fields))})")
        fields = {**cls.config_fields, **{k: v for k, v in data.items() if k in cls.config_fields}}
        fields["tie_word_embeddings"] = data.get("tie_word_embeddings", fields.get("tie_word_embeddings", True))
        for key in ("pad_token_id", "eos_token_id", "bos_token_id"):
            fields.setdefault(key, data.get(key))
        config = Config(cls.model_type, **fields)
        cls.check_config(config)
        return config

    @classmethod
    def check_config(cls, config: Config) -> None:
        """Refuse, by field and value, what this class cannot compute."""

    @classmethod
    def from_pretrained(cls, folder, *, dtype="auto", **model_kwargs):
        """The model of a Hugging Face folder, its weights loaded strictly, in eval mode (as transformers returns
        it). ``dtype``: a minidl dtype or its name, or ``"auto"`` (transformers 5's default): the config's ``dtype``,
        else the weights' own. ``model_kwargs`` go to the class's constructor, as transformers passes them (e.g.
        ``add_pooling_layer=False``)."""
        data = read_config(folder)
        config = cls.config_from_dict(data)
        state = read_weights(folder)
        dtype = _model_dtype(dtype, data, state, os.fspath(folder))
        with minidl.device("meta"):                        # no memory, no random draws: the file fills it
            model = cls(config, **model_kwargs).to(dtype)
        if model._fresh_absent(state):                     # a weight the file lacks starts from its initialisation
            model = cls(config, **model_kwargs).to(dtype)
        else:
            model.to_empty(device="cpu")
        model.load_hf_state_dict(state, source=os.fspath(folder))
        if isinstance(model, GenerationMixin):             # generate's defaults, as transformers reads them
            model.generation_config = read_generation_config(folder, data)
        return model.eval()

    def _fresh_absent(self, state: dict) -> bool:
        """Whether ``state`` lacks one of the ``fresh`` weights (which then need their initialisation)."""
        own, matched = self.state_dict(), self._matched(state)
        return any(k in own and k not in matched for k in self.fresh)

    def _matched(self, state: dict) -> dict:
        """``state`` under this model's names: the base-model prefix taken off or put on, ``unused`` weights
        dropped, tied ones filled from what they are tied to."""
        own = self.state_dict()
        prefix = self.base_model_prefix + "."
        if self.base_model_prefix and not any(k.startswith(prefix) for k in own):
            state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)} or state
        elif self.base_model_prefix and not any(k.startswith(prefix) for k in state):
            state = {prefix + k: v for k, v in state.items()}
        state = {k: v for k, v in state.items() if not k.startswith(self.unused)}
        if self.config.tie_word_embeddings:
            state = {**{target: state[source] for target, source in self.tied.items() if source in state}, **state}
        return state

    def load_hf_state_dict(self, state: dict, source: str = "the state dict") -> None:
        """Load a transformers state dict: a base model's names with or without the task model's prefix (a task
        model's folder lends a base model its base, a base model's folder is a task model's base), tied weights
        from what they are tied to, ``unused`` ones dropped, ``fresh`` ones kept if absent; every other difference
        is an error naming it."""
        own, state = self.state_dict(), self._matched(state)
        fresh = [k for k in own if k not in state and k in self.fresh]
        missing = [k for k in own if k not in state and k not in fresh]
        unexpected = [k for k in state if k not in own]
        wrong = [f"{k}: {list(state[k].shape)} in the checkpoint, {list(own[k].shape)} from the config"
                 for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
        if missing or unexpected or wrong:
            parts = [f"missing {', '.join(missing)}" if missing else "",
                     f"unexpected {', '.join(unexpected)}" if unexpected else "",
                     f"shapes differ: {'; '.join(wrong)}" if wrong else ""]
            raise RuntimeError(f"{type(self).__name__}.from_pretrained: {source} does not fit the config: "
                               + "; ".join(p for p in parts if p))
        if fresh:
            warnings.warn(f"{type(self).__name__}.from_pretrained: {source} has no {', '.join(fresh)}; they keep "
                          f"their initialisation (as transformers leaves them), untrained", stacklevel=3)
        with minidl.no_grad():
            for key, value in own.items():
                if key in state:
                    value.copy_(state[key])
        self.tie_weights()

    def tie_weights(self) -> None:
        """Make each tied weight the parameter it is tied to (one tensor, as transformers ties them)."""
        if not self.config.tie_word_embeddings:
            return
        for target, source in self.tied.items():
            owner_name, _, attr = target.rpartition(".")
            setattr(self.get_submodule(owner_name), attr, self.get_parameter(source))


def _model_dtype(dtype, config: dict, state: dict, folder: str):
    """The dtype ``from_pretrained`` builds in: ``dtype`` itself, or for "auto" (and None) the config's, else the
    first floating-point weight's, else float32."""
    if dtype in ("auto", None):
        named = config.get("dtype") or config.get("torch_dtype")
        if named is None:
            floating = (t.dtype for t in state.values() if t.is_floating_point())
            return next(floating, minidl.float32)
        dtype = named
    if isinstance(dtype, str):
        found = getattr(minidl, dtype.removeprefix("torch."), None)
        if not isinstance(found, minidl.dtype) or not found.is_floating_point:
            raise ValueError(f"from_pretrained: dtype {dtype!r} (for {folder!r}) is not a floating-point dtype "
                             f"minidl has (float32, float64, float16, bfloat16, or 'auto')")
        return found
    return dtype
