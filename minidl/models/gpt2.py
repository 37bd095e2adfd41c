"""GPT-2 (Radford et al., 2019) as transformers' ``GPT2Model`` and ``GPT2LMHeadModel`` compute it, with their
state-dict names, so that their folders load as they are: learned token (``wte``) and position (``wpe``) embeddings,
pre-norm blocks (``ln_1``, causal self-attention ``attn``, ``ln_2``, ``mlp``) and a final ``ln_f``; the language
model head is tied to ``wte`` (unless the config unties it). The projections are :class:`Conv1D` (weights stored
(in, out)), as OpenAI's checkpoints and transformers store them."""
from __future__ import annotations

import math
import re

import minidl
from minidl import nn
from minidl.nn import functional as F

from .activations import activation
from .cache import DynamicCache, one_cache
from .generation import GenerationMixin, keep_positions
from .losses import causal_lm_loss
from .masks import causal_mask
from .outputs import BaseModelOutputWithPastAndCrossAttentions, CausalLMOutputWithCrossAttentions
from .pretrained import PreTrainedModel, register

__all__ = ["Conv1D", "GPT2Model", "GPT2LMHeadModel"]

# the causal-mask buffers older transformers versions saved with each layer (transformers ignores them too)
_MASK_BUFFERS = re.compile(r"(^|\.)attn\.(masked_)?bias$")


class Conv1D(nn.Module):
    """y = x @ weight + bias with ``weight`` (in, out): a linear layer in GPT-2's layout (transposed from
    :class:`~minidl.nn.Linear`'s), named after the 1x1 convolution OpenAI's code wrote it as. Initialised as
    GPT-2's: weight N(0, std), bias 0."""

    def __init__(self, nf: int, nx: int, std: float = 0.02):
        super().__init__()
        self.nf, self.nx = nf, nx
        self.weight = nn.Parameter(minidl.empty(nx, nf).normal_(0.0, std))
        self.bias = nn.Parameter(minidl.zeros(nf))

    def forward(self, x):
        flat = minidl.addmm(self.bias, x.reshape(-1, self.nx), self.weight)
        return flat.reshape(*x.shape[:-1], self.nf)

    def extra_repr(self) -> str:
        return f"nf={self.nf}, nx={self.nx}"


class GPT2Attention(nn.Module):
    """Causal multi-head self-attention over one fused query/key/value projection (``c_attn``)."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.embed_dim, self.num_heads, self.layer_idx = config.n_embd, config.n_head, layer_idx
        self.head_dim = config.n_embd // config.n_head
        self.scaling = self.head_dim ** -0.5 if config.scale_attn_weights else 1.0
        if config.scale_attn_by_inverse_layer_idx:
            self.scaling /= float(layer_idx + 1)
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim, config.initializer_range)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim, _residual_std(config))
        self.attn_pdrop = config.attn_pdrop
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states, cache, mask):
        batch, length = hidden_states.shape[:2]
        query, key, value = (t.reshape(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
                             for t in self.c_attn(hidden_states).split(self.embed_dim, dim=2))
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=self.scaling,
                                             dropout_p=self.attn_pdrop if self.training else 0.0)
        out = out.transpose(1, 2).reshape(batch, length, self.embed_dim)
        return self.resid_dropout(self.c_proj(out))


class GPT2MLP(nn.Module):
    def __init__(self, inner: int, config):
        super().__init__()
        self.c_fc = Conv1D(inner, config.n_embd, config.initializer_range)
        self.act = activation(config.activation_function, "GPT2MLP", "activation_function")
        self.c_proj = Conv1D(config.n_embd, inner, _residual_std(config))
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(config.n_inner if config.n_inner is not None else 4 * config.n_embd, config)

    def forward(self, hidden_states, cache, mask):
        hidden_states = hidden_states + self.attn(self.ln_1(hidden_states), cache, mask)
        return hidden_states + self.mlp(self.ln_2(hidden_states))


class GPT2PreTrainedModel(PreTrainedModel):
    """GPT2Config's fields (transformers' defaults) and what the GPT-2 classes share."""
    model_type = "gpt2"
    base_model_prefix = "transformer"
    config_fields = {
        "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
        "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
        "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "use_cache": True, "add_cross_attention": False,
        # minidl's attention computes float16/bfloat16 scores and softmax in float32 whatever this says (without
        # dropout), which is what it asks for; transformers' default (sdpa) attention does not read it either
        "reorder_and_upcast_attn": False,
        # read by GPT2DoubleHeadsModel's multiple-choice head only
        "summary_type": "cls_index", "summary_use_proj": True, "summary_activation": None,
        "summary_proj_to_labels": True, "summary_first_dropout": 0.1,
        # in OpenAI's converted configs (gpt2, gpt2-medium, distilgpt2): read by nothing in transformers' GPT-2
        "n_ctx": None, "n_special": 0, "predict_special_tokens": True, "_num_labels": 1,
    }

    @classmethod
    def check_config(cls, config) -> None:
        activation(config.activation_function, cls.__name__, "activation_function")   # (raises for an unknown one)
        if config.n_embd % config.n_head:
            raise ValueError(f"{cls.__name__}: n_embd={config.n_embd} is not a multiple of n_head={config.n_head}")
        if config.add_cross_attention:
            raise ValueError(f"{cls.__name__}: add_cross_attention=True (GPT-2 as an encoder-decoder's decoder) is "
                             f"not supported by minidl's gpt2")

    def load_hf_state_dict(self, state: dict, source: str = "the state dict") -> None:
        """transformers' loading, the causal-mask buffers of older checkpoints (``h.{i}.attn.bias``) dropped."""
        super().load_hf_state_dict({k: v for k, v in state.items() if not _MASK_BUFFERS.search(k)}, source)


@register("GPT2Model")
class GPT2Model(GPT2PreTrainedModel):
    """The GPT-2 transformer: the last layer's normalised hidden states (and the key-value cache)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        std = config.initializer_range
        self.wte = nn.Embedding(config.vocab_size, config.n_embd,
                                _weight=minidl.empty(config.vocab_size, config.n_embd).normal_(0.0, std))
        self.wpe = nn.Embedding(config.n_positions, config.n_embd,
                                _weight=minidl.empty(config.n_positions, config.n_embd).normal_(0.0, std))
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([GPT2Block(config, i) for i in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

    def forward(self, input_ids=None, cache=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, *, use_cache=None, past_key_values=None):
        """``input_ids`` (batch, tokens), or their ``inputs_embeds`` (batch, tokens, n_embd), after the ``cache``'s
        tokens (``past_key_values``: transformers 4's name for it); ``attention_mask`` (batch, cached + new tokens;
        0 = padding); ``position_ids`` (default: counting on from the cache's length); ``token_type_ids`` embedded
        by ``wte`` and added, as transformers does. ``use_cache`` (default: the config's) returns the cache, a new
        :class:`DynamicCache` when none was given."""
        cache = one_cache(cache, past_key_values, type(self).__name__)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"{type(self).__name__}: pass input_ids or inputs_embeds (one of them)")
        if input_ids is not None and input_ids.ndim != 2:
            raise ValueError(f"{type(self).__name__}: input_ids must be (batch, tokens), got {list(input_ids.shape)}")
        embeds = self.wte(input_ids) if inputs_embeds is None else inputs_embeds
        length = embeds.shape[1]
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and cache is None:
            cache = DynamicCache()
        past = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            if past + length > self.config.n_positions:
                raise ValueError(f"{type(self).__name__}: {past} cached + {length} new tokens exceed n_positions="
                                 f"{self.config.n_positions}, the positions GPT-2 has embeddings for")
            position_ids = minidl.arange(past, past + length, device=embeds.device).unsqueeze(0)
        hidden_states = embeds + self.wpe(position_ids)
        if token_type_ids is not None:
            hidden_states = hidden_states + self.wte(token_type_ids)
        hidden_states = self.drop(hidden_states)
        mask = causal_mask(attention_mask, length, past, embeds.device)
        for block in self.h:
            hidden_states = block(hidden_states, cache, mask)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=self.ln_f(hidden_states),
                                                         cache=cache if use_cache else None)


@register("GPT2LMHeadModel", default_for="gpt2")
class GPT2LMHeadModel(GPT2PreTrainedModel, GenerationMixin):
    """GPT-2 with its language-model head (next-token logits over the vocabulary; the head is ``wte``, tied)."""
    tied = {"lm_head.weight": "transformer.wte.weight"}
    positions_field = "n_positions"   # (generate checks a prompt and its new tokens against it)

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = GPT2Model(config)
        # tied, the head's weight is wte's: its own is never drawn (made on meta, replaced by tie_weights)
        tied = config.tie_word_embeddings
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False, device="meta" if tied else None)
        if not tied:
            nn.init.normal_(self.lm_head.weight, std=config.initializer_range)
        self.tie_weights()

    def forward(self, input_ids=None, cache=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, *, labels=None, use_cache=None, logits_to_keep=0, past_key_values=None):
        """:meth:`GPT2Model.forward`'s arguments, and ``labels`` (batch, tokens; -100 = not scored; shifted inside,
        so the input ids will do) for the next-token ``loss``; ``logits_to_keep``: the logits of that many last
        tokens only (0: all), or of the positions a tensor of indices names."""
        out = self.transformer(input_ids, cache, attention_mask, token_type_ids, position_ids, inputs_embeds,
                               use_cache=use_cache, past_key_values=past_key_values)
        logits = self.lm_head(keep_positions(out.last_hidden_state, logits_to_keep))
        loss = None if labels is None else causal_lm_loss(logits, labels)
        return CausalLMOutputWithCrossAttentions(loss=loss, logits=logits, cache=out.cache)


def _residual_std(config) -> float:
    """GPT-2's initialisation of the projections onto the residual stream: N(0, initializer_range) scaled by
    1/sqrt(2 n_layer), the stream's number of additions."""
    return config.initializer_range / math.sqrt(2 * config.n_layer)
