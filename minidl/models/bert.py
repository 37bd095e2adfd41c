"""BERT (Devlin et al., 2019) as transformers builds it: ``BertModel`` and ``BertForMaskedLM`` with transformers'
module and weight names, so that its folders load as they are (``from_pretrained``).

The encoder only: a config asking for a decoder (``is_decoder``, ``add_cross_attention``), for another position
embedding than ``"absolute"`` (4.x's relative ones, which transformers 5 dropped) or for an activation minidl does
not compute is refused by name.

Across task models: ``BertModel`` read from a ``BertForMaskedLM`` folder takes its ``bert.`` weights; that folder has
no pooler (transformers builds the MLM model without one), so the pooler keeps its initialisation, as in
transformers, with a warning naming it (``add_pooling_layer=False`` builds none and warns of nothing).
``BertForMaskedLM`` read from a ``BertModel`` folder is an error naming the head it lacks (``cls.predictions.*``),
where transformers would start that head untrained; from a ``BertForPreTraining`` folder (the layout of Google's
checkpoints) it drops the pooler and the next-sentence head, as transformers does."""
from __future__ import annotations

import minidl
from minidl import nn
from minidl.nn import functional as F

from .activations import activation
from .masks import padding_mask
from .outputs import BaseModelOutputWithPoolingAndCrossAttentions, MaskedLMOutput
from .pretrained import PreTrainedModel, register

__all__ = ["BertModel", "BertForMaskedLM"]


class BertPreTrainedModel(PreTrainedModel):
    """The config and the loading both BERT classes share."""
    model_type = "bert"
    base_model_prefix = "bert"
    config_fields = {
        "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
        "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0, "is_decoder": False,
        "add_cross_attention": False, "tie_word_embeddings": True,
        "position_embedding_type": "absolute"}   # (not a 5.x field: 4.x's folders carry it)

    @classmethod
    def check_config(cls, config) -> None:
        name = cls.__name__
        if config.position_embedding_type != "absolute":
            raise ValueError(f"{name}: position_embedding_type={config.position_embedding_type!r} is not supported "
                             f"(minidl's BERT has absolute position embeddings only)")
        for field in ("is_decoder", "add_cross_attention"):
            if getattr(config, field):
                raise ValueError(f"{name}: {field}=True is not supported (minidl's BERT is an encoder only)")
        if config.hidden_size % config.num_attention_heads:
            raise ValueError(f"{name}: hidden_size {config.hidden_size} is not a multiple of num_attention_heads "
                             f"{config.num_attention_heads}")
        if config.pad_token_id is not None and not 0 <= config.pad_token_id < config.vocab_size:
            raise ValueError(f"{name}: pad_token_id {config.pad_token_id} is not a token of the vocabulary "
                             f"(vocab_size {config.vocab_size})")
        activation(config.hidden_act, name, "hidden_act")

    def load_hf_state_dict(self, state: dict, source: str = "the state dict") -> None:
        """Also the TensorFlow-era names of Google's checkpoints (``LayerNorm.gamma``, ``.beta``), which transformers
        reads as ``LayerNorm.weight`` and ``.bias``."""
        renamed = {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
                   for k, v in state.items()}
        super().load_hf_state_dict(renamed, source)


def _initialise(module: nn.Module, std: float) -> None:
    """transformers' initialisation: normal(0, initializer_range) weights, zero biases and padding rows (LayerNorm
    is already ones and zeros)."""
    with minidl.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
            if isinstance(m, nn.Embedding) and m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()


class BertEmbeddings(nn.Module):
    """Word + token type + position embeddings, normalised."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids, position_ids, inputs_embeds):
        embeds = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        batch, length = embeds.shape[:2]
        if position_ids is None:
            if length > self.position_embeddings.num_embeddings:
                raise ValueError(f"BertModel: {length} tokens, more than max_position_embeddings "
                                 f"({self.position_embeddings.num_embeddings})")
            position_ids = minidl.arange(length, device=embeds.device).reshape(1, length)
        if token_type_ids is None:
            token_type_ids = minidl.zeros(batch, length, dtype=minidl.int64, device=embeds.device)
        embeds = embeds + self.token_type_embeddings(token_type_ids) + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeds))


class BertSelfAttention(nn.Module):
    """Bidirectional multi-head attention, padding keys masked out."""

    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, hidden, mask):
        batch, length, _ = hidden.shape
        q, k, v = (proj(hidden).reshape(batch, length, self.num_heads, -1).transpose(1, 2)
                   for proj in (self.query, self.key, self.value))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             dropout_p=self.dropout_p if self.training else 0.0)
        return out.transpose(1, 2).reshape(batch, length, -1)


class BertResidualOutput(nn.Module):
    """Projection back to the hidden size, dropout, residual, LayerNorm: the end of the attention block
    (transformers' BertSelfOutput) and of the feed-forward block (BertOutput)."""

    def __init__(self, in_features: int, config):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden, residual):
        return self.LayerNorm(self.dropout(self.dense(hidden)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertResidualOutput(config.hidden_size, config)

    def forward(self, hidden, mask):
        return self.output(self.self(hidden, mask), hidden)


class BertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = activation(config.hidden_act, "BertModel", "hidden_act")

    def forward(self, hidden):
        return self.act(self.dense(hidden))


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertResidualOutput(config.intermediate_size, config)

    def forward(self, hidden, mask):
        attended = self.attention(hidden, mask)
        return self.output(self.intermediate(attended), attended)


class BertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, hidden, mask):
        for layer in self.layer:
            hidden = layer(hidden, mask)
        return hidden


class BertPooler(nn.Module):
    """tanh(dense(first token)): the sentence vector next-sentence prediction was trained on."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden):
        return self.dense(hidden[:, 0]).tanh()


@register("BertModel", default_for="bert")
class BertModel(BertPreTrainedModel):
    """The encoder, with the pooler unless ``add_pooling_layer=False``; returns ``last_hidden_state`` and
    ``pooler_output``."""
    unused = ("embeddings.position_ids",)   # (a buffer transformers 4.x before 4.31 saved)
    fresh = ("pooler.dense.weight", "pooler.dense.bias")

    def __init__(self, config, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        _initialise(self, config.initializer_range)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None):
        """``input_ids`` (batch, length), or ``inputs_embeds`` (batch, length, hidden); ``attention_mask`` (batch,
        length; 1 = token, 0 = padding), ``token_type_ids`` (default: all 0) and ``position_ids`` (default: 0 ..
        length - 1), as transformers' arguments of those names and places."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("BertModel: pass exactly one of input_ids and inputs_embeds")
        hidden = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)
        mask = None if attention_mask is None else padding_mask(attention_mask, hidden.shape[1])
        hidden = self.encoder(hidden, mask)
        return BaseModelOutputWithPoolingAndCrossAttentions(
            last_hidden_state=hidden, pooler_output=None if self.pooler is None else self.pooler(hidden))


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.hidden_act, "BertForMaskedLM", "hidden_act")
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden):
        return self.LayerNorm(self.act(self.dense(hidden)))


class BertLMPredictionHead(nn.Module):
    """Scores over the vocabulary; ``decoder`` is the word embeddings and its bias ``bias`` when tied."""

    def __init__(self, config):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(minidl.zeros(config.vocab_size))

    def forward(self, hidden):
        return self.decoder(self.transform(hidden))


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)

    def forward(self, hidden):
        return self.predictions(hidden)


@register("BertForMaskedLM")
class BertForMaskedLM(BertPreTrainedModel):
    """The encoder without pooler and the masked-language-model head; returns ``logits`` and, given ``labels``,
    the mean cross entropy over the tokens whose label is not -100."""
    tied = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
            "cls.predictions.decoder.bias": "cls.predictions.bias"}
    unused = ("bert.embeddings.position_ids", "bert.pooler.", "cls.seq_relationship.")

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        _initialise(self.cls, config.initializer_range)
        self.tie_weights()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, *, labels=None):
        """BertModel's arguments; ``labels`` (batch, length) by keyword (transformers places two decoder arguments
        before it)."""
        hidden = self.bert(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds).last_hidden_state
        logits = self.cls(hidden)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        return MaskedLMOutput(loss=loss, logits=logits)
