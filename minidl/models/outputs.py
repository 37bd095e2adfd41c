"""What the Hugging Face models return: transformers' (5.x) output classes, whose fields are read by name
(``out.logits``), by key (``out["logits"]``) or by position among those that are set (``out[0]``). The key-value
cache is the field ``cache`` (transformers 4's ``past_key_values``)."""
from __future__ import annotations

__all__ = ["BaseModelOutputWithPastAndCrossAttentions", "BaseModelOutputWithPoolingAndCrossAttentions",
           "CausalLMOutputWithCrossAttentions", "CausalLMOutputWithPast", "MaskedLMOutput", "ModelOutput",
           "BaseModelOutputWithPast"]


class ModelOutput:
    """Named results; the fields left None are absent from ``keys()`` and from positional indexing, as in
    transformers."""
    fields: tuple = ()

    def __init__(self, **values):
        unknown = set(values) - set(self.fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field(s) {', '.join(sorted(unknown))}")
        for name in self.fields:
            setattr(self, name, values.get(name))

    def keys(self) -> list:
        return [name for name in self.fields if getattr(self, name) is not None]

    def to_tuple(self) -> tuple:
        return tuple(getattr(self, name) for name in self.keys())

    def __getitem__(self, key):
        return self.to_tuple()[key] if isinstance(key, (int, slice)) else getattr(self, key)

    def __iter__(self):
        return iter(self.keys())

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(self.keys())})"


def _output(name: str, *fields: str) -> type:
    return type(name, (ModelOutput,), {"fields": fields, "__doc__": f"transformers' {name}."})


CausalLMOutputWithPast = _output("CausalLMOutputWithPast", "loss", "logits", "cache", "hidden_states",
                                 "attentions")
CausalLMOutputWithCrossAttentions = _output("CausalLMOutputWithCrossAttentions", "loss", "logits", "cache",
                                            "hidden_states", "attentions", "cross_attentions")
BaseModelOutputWithPast = _output("BaseModelOutputWithPast", "last_hidden_state", "cache", "hidden_states",
                                  "attentions")
BaseModelOutputWithPastAndCrossAttentions = _output("BaseModelOutputWithPastAndCrossAttentions", "last_hidden_state",
                                                    "cache", "hidden_states", "attentions",
                                                    "cross_attentions")
BaseModelOutputWithPoolingAndCrossAttentions = _output(
    "BaseModelOutputWithPoolingAndCrossAttentions", "last_hidden_state", "pooler_output", "hidden_states", "cache",
    "attentions", "cross_attentions")
MaskedLMOutput = _output("MaskedLMOutput", "loss", "logits", "hidden_states", "attentions")
