"""Ready-made models on the public Tensor and nn API (as torchvision.models are): one submodule a family —
``recsys`` (NeuMF, Wide & Deep) and ``metrics``, the measures their papers report; the Hugging Face language models
``gpt2``, ``llama`` and ``bert``, read from transformers' folders by ``from_pretrained`` (``pretrained``), with
``generate`` over a key-value ``cache``.

``import minidl`` does not import this package, and the package imports a family when one of its names is
first used (PEP 562), so a family added costs nothing to those who use another: it is a submodule and its
names in ``_EXPORTS``."""
import importlib

_EXPORTS = {"NeuMF": "recsys", "WideDeep": "recsys",   # name -> the submodule that defines it
            "from_pretrained": "pretrained", "DynamicCache": "cache", "GenerationConfig": "generation",
            "GPT2Model": "gpt2", "GPT2LMHeadModel": "gpt2", "LlamaModel": "llama", "LlamaForCausalLM": "llama",
            "BertModel": "bert", "BertForMaskedLM": "bert"}
_SUBMODULES = ("metrics", *dict.fromkeys(_EXPORTS.values()))
__all__ = [*_SUBMODULES, *_EXPORTS]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")   # (which binds it here: asked once)
    if name in _EXPORTS:
        value = globals()[name] = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})
