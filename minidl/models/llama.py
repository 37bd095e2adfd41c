"""LLaMA (Llama 1 to 3 and the checkpoints of its architecture, TinyLlama and the like) read from transformers'
folders, with transformers' state-dict names, so its checkpoints load unchanged.

A pre-norm decoder: RMSNorm, attention with rotary position embeddings and (grouped-query attention) fewer key-value
heads than query heads, RMSNorm, SwiGLU feed-forward.

Numerics: RMSNorm normalises, and the rotary tables are computed, in the model's dtype where it is at least float32 and
in float32 where it is narrower. A float32 or half-precision model so keeps transformers' float32 islands and gives
its outputs (bfloat16 RMSNorm bit for bit); a float64 model is float64 throughout, where transformers' rounds its norms
and rotary tables (and its loss) through float32."""
from __future__ import annotations

import math

import minidl
from minidl import nn
from minidl.nn import functional as F

from .activations import activation
from .cache import DynamicCache, one_cache
from .generation import GenerationMixin, keep_positions
from .losses import causal_lm_loss
from .masks import causal_mask
from .outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from .pretrained import PreTrainedModel, register

__all__ = ["LlamaForCausalLM", "LlamaModel"]

# rope type -> the rope_parameters keys it reads besides rope_type (legacy: type) and rope_theta
ROPE_KEYS = {"default": set(), "linear": {"factor"},
             "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}}


def head_dim(config) -> int:
    return config.head_dim or config.hidden_size // config.num_attention_heads


def kv_heads(config) -> int:
    return config.num_key_value_heads or config.num_attention_heads


def rope_settings(config) -> dict:
    """The rotary settings as transformers 5 reads them: transformers 4's ``rope_scaling`` if set (its ``type`` is the
    old name of ``rope_type``), else ``rope_parameters``; theta from there, else the top-level ``rope_theta`` (4's
    place for it), else 10000."""
    params = dict(config.rope_scaling or config.rope_parameters or {})
    legacy = params.pop("type", None)
    params.setdefault("rope_type", legacy or "default")
    params.setdefault("rope_theta", config.rope_theta if config.rope_theta is not None else 10000.0)
    if params["rope_type"] == "llama3":
        params.setdefault("original_max_position_embeddings", config.max_position_embeddings)
    if params.get("partial_rotary_factor", 1.0) == 1.0:
        params.pop("partial_rotary_factor", None)   # (a partial rotation is refused below, by name)
    return params


def inverse_frequencies(config, dtype):
    """(head_dim / 2,) rotation speeds of the rotary embedding in ``dtype``, scaled as the rope type says: constants
    on the host (also when the model is built on 'meta'), moved to the positions' device when used."""
    params, dim = rope_settings(config), head_dim(config)
    exponents = minidl.arange(0, dim, 2, dtype=minidl.int64, device="cpu").to(dtype) / dim
    inv_freq = 1.0 / (params["rope_theta"] ** exponents)
    kind = params["rope_type"]
    if kind == "linear":
        return inv_freq / params["factor"]
    if kind == "llama3":   # long wavelengths slowed by `factor`, short ones kept, those between blended
        factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
        context = params["original_max_position_embeddings"]
        wavelength = 2 * math.pi / inv_freq
        scaled = minidl.where(wavelength > context / low, inv_freq / factor, inv_freq)
        smooth = (context / wavelength - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        between = (wavelength >= context / high) & (wavelength <= context / low)
        return minidl.where(between, blended, scaled)
    return inv_freq


class LlamaRMSNorm(nn.Module):
    """transformers' LLaMA RMSNorm: the normalisation in float32 (float64 for float64 input), cast back to the
    input's dtype, then scaled by ``weight`` (nn.RMSNorm scales in the input's dtype and would differ in bfloat16)."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(minidl.ones(hidden_size))
        self.eps = eps

    def forward(self, x):
        h = x.to(minidl.promote_types(x.dtype, minidl.float32))
        h = h * minidl.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


class LlamaRotaryEmbedding(nn.Module):
    """cos and sin of each position's rotation angles, (batch, tokens, head_dim), cast to the hidden states' dtype:
    computed in float32 as transformers computes them, in float64 for float64 hidden states."""

    def __init__(self, config):
        super().__init__()
        # a table for each dtype computed in; plain attributes, not buffers: model.to(bfloat16) must not round them
        self.inv_freq = {dtype: inverse_frequencies(config, dtype) for dtype in (minidl.float32, minidl.float64)}

    def forward(self, x, position_ids):
        dtype = minidl.promote_types(x.dtype, minidl.float32)
        angles = position_ids[..., None].to(dtype) * self.inv_freq[dtype].to(position_ids.device)
        angles = minidl.cat([angles, angles], dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


def rotate(x, cos, sin):
    """x (batch, heads, tokens, head_dim) rotated pairwise (i, i + head_dim/2) by the angles of cos and sin."""
    half = x.shape[-1] // 2
    return x * cos + minidl.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class LlamaAttention(nn.Module):
    """Causal self-attention with rotary positions; ``num_key_value_heads`` key-value heads each shared by a group
    of query heads (grouped-query attention)."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.layer_idx, self.head_dim = layer_idx, head_dim(config)
        self.heads, self.kv_heads = config.num_attention_heads, kv_heads(config)
        self.dropout = config.attention_dropout
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=bias)

    def forward(self, hidden, cos, sin, mask, cache):
        batch, tokens = hidden.shape[:2]

        def heads(proj):
            return proj(hidden).view(batch, tokens, -1, self.head_dim).transpose(1, 2)
        query, key, value = heads(self.q_proj), heads(self.k_proj), heads(self.v_proj)
        query, key = rotate(query, cos, sin), rotate(key, cos, sin)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=self.head_dim ** -0.5,
                                             dropout_p=self.dropout if self.training else 0.0,
                                             enable_gqa=self.kv_heads != self.heads)
        return self.o_proj(out.transpose(1, 2).reshape(batch, tokens, -1))


class LlamaMLP(nn.Module):
    """A gated feed-forward: down(act(gate(x)) * up(x)); with LLaMA's silu, SwiGLU."""

    def __init__(self, config):
        super().__init__()
        bias = config.mlp_bias
        self.act = activation(config.hidden_act, "LlamaMLP", "hidden_act")
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=bias)

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    """x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_idx)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden, cos, sin, mask, cache):
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), cos, sin, mask, cache)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class LlamaPreTrainedModel(PreTrainedModel):
    """The LLaMA config fields (transformers 5.24's defaults; transformers 4's ``rope_theta`` and ``rope_scaling``
    read too) and the values this implementation refuses."""
    model_type = "llama"
    base_model_prefix = "model"
    config_fields = {
        "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "head_dim": None, "hidden_act": "silu",
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "pretraining_tp": 1, "tie_word_embeddings": False,
        "rope_parameters": None, "rope_theta": None, "rope_scaling": None, "attention_bias": False,
        "attention_dropout": 0.0, "mlp_bias": False, "use_cache": True}

    @classmethod
    def check_config(cls, config) -> None:
        name = cls.__name__
        activation(config.hidden_act, name, "hidden_act")
        if config.pretraining_tp != 1:
            raise ValueError(f"{name}: pretraining_tp {config.pretraining_tp} is not supported (only 1)")
        if config.num_attention_heads % kv_heads(config):
            raise ValueError(f"{name}: num_attention_heads ({config.num_attention_heads}) is not divisible by "
                             f"num_key_value_heads ({kv_heads(config)})")
        if not config.head_dim and config.hidden_size % config.num_attention_heads:
            raise ValueError(f"{name}: hidden_size ({config.hidden_size}) is not divisible by num_attention_heads "
                             f"({config.num_attention_heads}) and the config sets no head_dim")
        if head_dim(config) % 2:
            raise ValueError(f"{name}: head_dim {head_dim(config)} is odd (rotary embeddings rotate pairs)")
        params = rope_settings(config)
        kind = params["rope_type"]
        if kind not in ROPE_KEYS:
            raise ValueError(f"{name}: rope_type {kind!r} is not supported (minidl's LLaMA computes "
                             f"{', '.join(map(repr, ROPE_KEYS))})")
        unknown = sorted(set(params) - ROPE_KEYS[kind] - {"rope_type", "rope_theta"})
        if unknown:
            raise ValueError(f"{name}: rope_parameters field(s) {', '.join(map(repr, unknown))} are not supported "
                             f"with rope_type {kind!r}")
        missing = sorted(ROPE_KEYS[kind] - set(params))
        if missing:
            raise ValueError(f"{name}: rope_type {kind!r} needs rope_parameters {', '.join(map(repr, missing))}")

    def load_hf_state_dict(self, state: dict, source: str = "the state dict") -> None:
        # checkpoints saved by transformers before 4.31 hold each layer's rotary frequencies, computed here instead
        state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
        super().load_hf_state_dict(state, source)


@register("LlamaModel")
class LlamaModel(LlamaPreTrainedModel):
    """The decoder stack: token embeddings to the final RMSNorm's hidden states (batch, tokens, hidden_size)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, inputs_embeds=None,
                use_cache=None, *, past_key_values=None):
        """``input_ids`` (batch, tokens) or ``inputs_embeds`` (batch, tokens, hidden_size); ``attention_mask``
        (batch, cached + new tokens; 0 = padding); ``position_ids`` default to the tokens' indices after the cached
        ones (padding counted, as transformers' forward does; ``generate`` passes positions that skip it). With
        ``use_cache`` (default: the config's), the keys and values go to ``cache`` (a new DynamicCache if None;
        ``past_key_values``: transformers 4's name for it)."""
        cache = one_cache(cache, past_key_values, type(self).__name__)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"{type(self).__name__}: pass exactly one of input_ids and inputs_embeds")
        hidden = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and cache is None:
            cache = DynamicCache()
        past = cache.get_seq_length() if cache is not None else 0
        tokens = hidden.shape[1]
        if position_ids is None:
            position_ids = minidl.arange(past, past + tokens, device=hidden.device)[None]
        mask = causal_mask(attention_mask, tokens, past, hidden.device)
        cos, sin = self.rotary_emb(hidden, position_ids)
        cos, sin = cos[:, None], sin[:, None]   # (batch, 1 = every head, tokens, head_dim)
        for layer in self.layers:
            hidden = layer(hidden, cos, sin, mask, cache)
        return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden), cache=cache)


@register("LlamaForCausalLM", default_for="llama")
class LlamaForCausalLM(LlamaPreTrainedModel, GenerationMixin):
    """LLaMA with its language-model head (tied to the token embeddings when ``tie_word_embeddings``)."""
    tied = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, inputs_embeds=None,
                labels=None, use_cache=None, logits_to_keep=0, *, past_key_values=None):
        """LlamaModel's arguments, plus ``labels`` (batch, tokens; -100 = ignored) for the shifted next-token loss
        and ``logits_to_keep`` (an int n: the last n positions' logits only, 0 = all; or a tensor of positions)."""
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                         inputs_embeds=inputs_embeds, use_cache=use_cache, past_key_values=past_key_values)
        logits = self.lm_head(keep_positions(out.last_hidden_state, logits_to_keep))
        loss = causal_lm_loss(logits, labels) if labels is not None else None
        return CausalLMOutputWithPast(loss=loss, logits=logits, cache=out.cache)
