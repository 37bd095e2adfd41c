"""Attention layers: MultiheadAttention, the Transformer encoder/decoder layers and stacks, and the full
encoder-decoder Transformer, with PyTorch's parameters (names, shapes, initialisation), masks and
(seq, batch, feature) / batch_first layouts."""
from __future__ import annotations

import copy
import math

import minidl

from . import functional as F
from . import init
from .container import ModuleList
from .dropout import Dropout
from .linear import Linear, NonDynamicallyQuantizableLinear
from .module import Module
from .normalization import LayerNorm
from .parameter import Parameter


class MultiheadAttention(Module):
    """Attention with ``num_heads`` heads of ``embed_dim // num_heads`` features each.

    Masks follow PyTorch's MultiheadAttention convention (not SDPA's): a boolean ``attn_mask`` or
    ``key_padding_mask`` marks with True the keys a query must *not* attend to; a float one is added
    to the scores. A query that may attend to no key gets a zero attention output (PyTorch gives the
    same with ``need_weights=False``, NaN with ``need_weights=True``).

    With ``need_weights=False`` (as the Transformer layers call it) the heads attend through
    ``F.scaled_dot_product_attention``, one fused kernel that never stores the weights; with
    ``need_weights=True`` through the composition of tensor ops, which returns them.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"MultiheadAttention: embed_dim and num_heads must be positive, got {embed_dim} "
                             f"and {num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.dropout, self.batch_first = dropout, batch_first
        self.head_dim = embed_dim // num_heads
        kw = dict(device=device, dtype=dtype)
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(minidl.empty(3 * embed_dim, embed_dim, **kw))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(minidl.empty(embed_dim, embed_dim, **kw))
            self.k_proj_weight = Parameter(minidl.empty(embed_dim, self.kdim, **kw))
            self.v_proj_weight = Parameter(minidl.empty(embed_dim, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(minidl.empty(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(minidl.empty(1, 1, embed_dim, **kw))
            self.bias_v = Parameter(minidl.empty(1, 1, embed_dim, **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    # -- forward ------------------------------------------------------------------------------
    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        """(attention output shaped like ``query``, weights (N, L, S) averaged over heads or
        (N, num_heads, L, S), or None when not ``need_weights``)."""
        batched = self._check_inputs(query, key, value)
        if is_causal and attn_mask is None:
            raise RuntimeError("MultiheadAttention: is_causal=True is a hint that attn_mask is the causal mask; "
                               "pass the mask too")
        if not batched:
            bdim = 0 if self.batch_first else 1
            query, key, value = query.unsqueeze(bdim), key.unsqueeze(bdim), value.unsqueeze(bdim)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        q, k, v = self._project(query, key, value)
        n, L, S = q.shape[0], q.shape[2], k.shape[2]
        masks = [self._mask(attn_mask, "attn_mask", n, L, S),
                 self._mask(key_padding_mask, "key_padding_mask", n, L, S)]
        if self.bias_k is not None:
            k, v = (_append_key(t, b.reshape(1, self.num_heads, 1, self.head_dim).expand(n, -1, -1, -1))
                    for t, b in ((k, self.bias_k), (v, self.bias_v)))
            masks = [_allow_last_key(m) for m in masks]
        if self.add_zero_attn:
            k, v = (_append_key(t, t.new_zeros(n, self.num_heads, 1, self.head_dim)) for t in (k, v))
            masks = [_allow_last_key(m) for m in masks]
        dropout_p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            out, weights = F._attention(q, k, v, _merge_masks(*masks, q.dtype), dropout_p,
                                        1.0 / math.sqrt(self.head_dim))
            if average_attn_weights:
                weights = weights.mean(1)
            if not batched:
                weights = weights.squeeze(0)
        else:
            # torch's rule: the is_causal hint replaces attn_mask unless padding is given; here also unless a
            # key was appended (bias_k, add_zero_attn), which every query may see and a causal kernel would hide
            causal = is_causal and key_padding_mask is None and self.bias_k is None and not self.add_zero_attn
            mask = None if causal else _merge_masks(*masks, q.dtype)
            out = F.scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal=causal)
        out = out.permute(0, 2, 1, 3) if self.batch_first else out.permute(2, 0, 1, 3)   # heads next to features
        out = self.out_proj(out.reshape(tuple(out.shape[:2]) + (self.embed_dim,)))
        if not batched:
            out = out.squeeze(0 if self.batch_first else 1)
        return out, weights

    def _check_inputs(self, query, key, value) -> bool:
        """Whether the inputs are batched; raises on shapes that do not fit this layer."""
        name = type(self).__name__
        layout = "(N, L, E)" if self.batch_first else "(L, N, E)"
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise RuntimeError(f"{name}: expected query, key and value all 3D {layout} or all 2D (L, E), got "
                               f"shapes {list(query.shape)}, {list(key.shape)}, {list(value.shape)}")
        for t, what, dim in ((query, "query", self.embed_dim), (key, "key", self.kdim), (value, "value", self.vdim)):
            if t.shape[-1] != dim:
                raise RuntimeError(f"{name}: expected {what} with {dim} features (last dim), got shape "
                                   f"{list(t.shape)}")
        if key.shape[:-1] != value.shape[:-1]:
            raise RuntimeError(f"{name}: key {list(key.shape)} and value {list(value.shape)} must have the same "
                               "sequence and batch dims")
        bdim = 0 if self.batch_first else 1
        if query.ndim == 3 and query.shape[bdim] != key.shape[bdim]:
            raise RuntimeError(f"{name}: query {list(query.shape)} and key {list(key.shape)} have different batch "
                               f"sizes (layout {layout})")
        return query.ndim == 3

    def _project(self, query, key, value):
        """The input projections, as (N, heads, seq, head_dim) views. Self-attention (one tensor for
        query, key and value) is one matmul with all of in_proj_weight; key is value, one for both."""
        E, w, b = self.embed_dim, self.in_proj_weight, self.in_proj_bias
        if w is not None and query is key and key is value:
            return self._heads(F.linear(query, w, b), 3)
        bq, bk, bv = (None,) * 3 if b is None else b.split(E)
        if w is None:
            return (self._heads(F.linear(query, self.q_proj_weight, bq)),
                    self._heads(F.linear(key, self.k_proj_weight, bk)),
                    self._heads(F.linear(value, self.v_proj_weight, bv)))
        q = self._heads(F.linear(query, w[:E], bq))
        if key is value:
            return (q,) + self._heads(F.linear(key, w[E:], None if b is None else b[E:]), 2)
        return q, self._heads(F.linear(key, w[E:2 * E], bk)), self._heads(F.linear(value, w[2 * E:], bv))

    def _heads(self, x, parts: int = 1):
        """(N, seq, parts*E) or (seq, N, parts*E) -> ``parts`` views (N, heads, seq, head_dim), or one."""
        split = F._split_heads(x, parts, self.num_heads, self.batch_first)
        return split if parts > 1 else split[0]

    def _mask(self, mask, what: str, n: int, L: int, S: int):
        """``mask`` broadcastable to the (N, heads, L, S) scores: bool with True = blocked, or float."""
        if mask is None:
            return None
        if mask.dtype is not minidl.bool and not mask.dtype.is_floating_point:
            raise TypeError(f"{type(self).__name__}: only bool and floating point {what} are supported, got "
                            f"{mask.dtype}")
        if what == "key_padding_mask":
            if tuple(mask.shape) != (n, S):
                raise RuntimeError(f"{type(self).__name__}: key_padding_mask of shape {list(mask.shape)}, expected "
                                   f"(N, S) = {[n, S]}")
            return mask.reshape(n, 1, 1, S)
        if tuple(mask.shape) == (L, S):
            return mask
        if tuple(mask.shape) == (n * self.num_heads, L, S):
            return mask.reshape(n, self.num_heads, L, S)
        raise RuntimeError(f"{type(self).__name__}: attn_mask of shape {list(mask.shape)}, expected (L, S) = "
                           f"{[L, S]} or (N * num_heads, L, S) = {[n * self.num_heads, L, S]}")


def _append_key(t, extra):
    """One more key (or value) position at the end of the (N, heads, S, head_dim) sequence."""
    return minidl.cat([t, extra.to(t.dtype)], 2)


def _allow_last_key(mask):
    """Extend a mask to one more key, which every query may attend to."""
    if mask is None:
        return None
    return minidl.cat([mask, mask.new_zeros(tuple(mask.shape[:-1]) + (1,))], -1)


def _merge_masks(attn_mask, padding_mask, dtype):
    """One mask in F._attention's and SDPA's convention (bool: True = take part; float: additive)."""
    masks = [m for m in (attn_mask, padding_mask) if m is not None]
    if not masks:
        return None
    if all(m.dtype is minidl.bool for m in masks):
        blocked = masks[0] if len(masks) == 1 else masks[0].logical_or(masks[1])
        return blocked.logical_not()
    merged = None
    for m in masks:
        additive = m.new_zeros(tuple(m.shape), dtype=dtype).masked_fill(m, -math.inf) if m.dtype is minidl.bool \
            else m.to(dtype)
        merged = additive if merged is None else merged + additive
    return merged


# ----------------------------------------------------------------------------- Transformer layers
def _activation(activation):
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return activation


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with a residual connection and LayerNorm:
    after the residual (post-norm, the default) or on the block's input (``norm_first``)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        _build_layer(self, 2, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                     norm_first, bias, dict(device=device, dtype=dtype))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        if self.norm_first:
            x = x + _sa_block(self, self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + _ff_block(self, self.norm2(x), self.dropout2)
        x = self.norm1(x + _sa_block(self, x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + _ff_block(self, x, self.dropout2))


class TransformerDecoderLayer(Module):
    """Self-attention over the target, attention to the encoder's output (``memory``), then a
    feed-forward block; residuals and LayerNorm placed as in TransformerEncoderLayer."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        _build_layer(self, 3, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                     norm_first, bias, dict(device=device, dtype=dtype))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False):
        x = tgt
        if self.norm_first:
            x = x + _sa_block(self, self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + _ff_block(self, self.norm3(x), self.dropout3)
        x = self.norm1(x + _sa_block(self, x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + _ff_block(self, x, self.dropout3))

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                need_weights=False, is_causal=is_causal)[0]
        return self.dropout2(x)


def _build_layer(layer, blocks, d_model, nhead, dim_feedforward, dropout, activation, eps, batch_first, norm_first,
                 bias, kw) -> None:
    """The modules of an encoder (2 blocks) or decoder (3 blocks: with cross-attention) layer, registered
    in PyTorch's order, which the state_dict keys follow."""
    for name in ("self_attn", "multihead_attn")[:blocks - 1]:
        setattr(layer, name, MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                                **kw))
    layer.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
    layer.dropout = Dropout(dropout)
    layer.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
    layer.norm_first = norm_first
    for i in range(1, blocks + 1):
        setattr(layer, f"norm{i}", LayerNorm(d_model, eps=eps, bias=bias, **kw))
    for i in range(1, blocks + 1):
        setattr(layer, f"dropout{i}", Dropout(dropout))
    layer.activation = _activation(activation)


def _sa_block(layer, x, attn_mask, key_padding_mask, is_causal):
    x = layer.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                        is_causal=is_causal)[0]
    return layer.dropout1(x)


def _ff_block(layer, x, dropout):
    return dropout(layer.linear2(layer.dropout(layer.activation(layer.linear1(x)))))


class TransformerEncoder(Module):
    """``num_layers`` independent copies of ``encoder_layer`` in sequence, then ``norm`` if given."""

    def __init__(self, encoder_layer, num_layers: int, norm=None, enable_nested_tensor: bool = True,
                 mask_check: bool = True):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """``num_layers`` independent copies of ``decoder_layer`` in sequence, then ``norm`` if given."""

    def __init__(self, decoder_layer, num_layers: int, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal: bool = False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=bool(tgt_is_causal),
                      memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)


def _clones(module, n: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


# ----------------------------------------------------------------------------- the full model
def _generate_square_subsequent_mask(sz: int, device=None, dtype=None):
    """(sz, sz) float mask: -inf above the diagonal (a later position), 0 on and below it."""
    return minidl.triu(minidl.full((sz, sz), float("-inf"), dtype=dtype, device=device), diagonal=1)


class Transformer(Module):
    """The encoder-decoder Transformer of "Attention Is All You Need", with PyTorch's arguments,
    submodules (``encoder.layers.N``, ``encoder.norm``, ``decoder.layers.N``, ``decoder.norm``) and
    initialisation: after building, xavier_uniform_ on every parameter of more than one dim (those of a
    ``custom_encoder`` / ``custom_decoder`` included), so the stacked layers start from different weights.
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation=F.relu, custom_encoder=None, custom_decoder=None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first,
                      bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(TransformerEncoderLayer(*layer_args, **kw), num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(TransformerDecoderLayer(*layer_args, **kw), num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal: bool = False):
        """``src`` (S, N, E) or (N, S, E) with batch_first, or unbatched (S, E); ``tgt`` likewise with T
        positions. Returns the decoder's output, shaped like ``tgt``."""
        batched = src.dim() == 3
        bdim = 0 if self.batch_first else 1
        if batched and src.shape[bdim] != tgt.shape[bdim]:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """The causal mask for ``sz`` positions: -inf above the diagonal, 0 elsewhere (float)."""
        return _generate_square_subsequent_mask(sz, device=device, dtype=dtype)

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)
