"""minidl.models' BERT against transformers as the oracle: tiny random BERTs saved by transformers'
``save_pretrained`` are read by minidl, and the two compute the same hidden states, pooled outputs, MLM logits, loss
and gradients, on a right-padded batch with an attention mask and two token types."""
import json
import os
import shutil
import warnings

import numpy as np
import pytest

import minidl
from minidl import models
from minidl.models.activations import ACTIVATIONS

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64)
LENGTHS = (9, 6, 3)   # right padding
TOL = {minidl.float32: 1e-4, minidl.float64: 1e-10}


def build(cls, **config):
    """A transformers model with random weights, biases and LayerNorms (not its zero / one initialisation)."""
    torch.manual_seed(0)
    model = cls(transformers.BertConfig(**{**TINY, **config}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def saved(model, folder, **kwargs):
    model.save_pretrained(folder, **kwargs)
    return folder


@pytest.fixture(scope="module")
def mlm(tmp_path_factory):
    model = build(transformers.BertForMaskedLM)
    return model, saved(model, tmp_path_factory.mktemp("mlm"))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    model = build(transformers.BertModel)
    return model, saved(model, tmp_path_factory.mktemp("base"))


def batch():
    """ids (pad 0 after each length), attention_mask, token_type_ids (1 from the fourth token), MLM labels (-100
    at padding and at every other token)."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, TINY["vocab_size"], (len(LENGTHS), max(LENGTHS)), generator=gen)
    mask = (torch.arange(max(LENGTHS)) < torch.tensor(LENGTHS).reshape(-1, 1)).long()
    ids = ids * mask
    token_types = torch.zeros_like(ids)
    token_types[:, 3:] = 1
    labels = torch.where(mask.bool() & (torch.arange(max(LENGTHS)) % 2 == 0), ids, torch.tensor(-100))
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=token_types), labels


def to_minidl(inputs: dict) -> dict:
    return {k: minidl.from_numpy(v.numpy()) for k, v in inputs.items()}


def close(ours, theirs, dtype, where=None):
    ours, theirs = ours.detach().numpy(), theirs.detach().numpy()
    if where is not None:
        ours, theirs = ours[where], theirs[where]
    assert np.abs(ours - theirs).max() <= TOL[dtype] * np.abs(theirs).max()


def oracle(model, dtype):
    return model.double() if dtype is minidl.float64 else model.float()


@pytest.mark.parametrize("dtype", [minidl.float32, minidl.float64])
def test_base_model_agrees(base, dtype):
    model, folder = base
    inputs, _ = batch()
    ours = models.BertModel.from_pretrained(folder, dtype=dtype)(**to_minidl(inputs))
    with torch.no_grad():
        theirs = oracle(model, dtype)(**inputs)
    assert ours.last_hidden_state.dtype is dtype
    close(ours.last_hidden_state, theirs.last_hidden_state, dtype, where=inputs["attention_mask"].bool().numpy())
    close(ours.pooler_output, theirs.pooler_output, dtype)
    assert ours.keys() == ["last_hidden_state", "pooler_output"]


@pytest.mark.parametrize("dtype", [minidl.float32, minidl.float64])
def test_masked_lm_agrees(mlm, dtype):
    model, folder = mlm
    inputs, labels = batch()
    ours = models.BertForMaskedLM.from_pretrained(folder, dtype=dtype)(**to_minidl(inputs),
                                                                         labels=minidl.from_numpy(labels.numpy()))
    with torch.no_grad():
        theirs = oracle(model, dtype)(**inputs, labels=labels)
    close(ours.logits, theirs.logits, dtype, where=inputs["attention_mask"].bool().numpy())
    close(ours.loss, theirs.loss, dtype)
    assert ours.keys() == ["loss", "logits"]


def test_gradients_agree(mlm):
    model, folder = mlm
    inputs, labels = batch()
    ours = models.BertForMaskedLM.from_pretrained(folder, dtype=minidl.float64)
    ours(**to_minidl(inputs), labels=minidl.from_numpy(labels.numpy())).loss.backward()
    model = model.double()
    model.zero_grad()
    model(**inputs, labels=labels).loss.backward()
    for name in ("bert.embeddings.word_embeddings.weight", "bert.encoder.layer.0.attention.self.query.weight",
                 "cls.predictions.bias", "bert.embeddings.token_type_embeddings.weight"):
        close(ours.get_parameter(name).grad, model.get_parameter(name).grad, minidl.float64)


def test_position_ids_and_inputs_embeds_agree(base):
    model, folder = base
    inputs, _ = batch()
    inputs["position_ids"] = torch.arange(max(LENGTHS)).flip(0).reshape(1, -1) + 3
    ours = models.BertModel.from_pretrained(folder, dtype=minidl.float64)
    embeds = ours.embeddings.word_embeddings(minidl.from_numpy(inputs["input_ids"].numpy()))
    by_embeds = ours(inputs_embeds=embeds, **to_minidl({k: v for k, v in inputs.items() if k != "input_ids"}))
    with torch.no_grad():
        theirs = model.double()(**inputs)
    mask = inputs["attention_mask"].bool().numpy()
    close(ours(**to_minidl(inputs)).last_hidden_state, theirs.last_hidden_state, minidl.float64, where=mask)
    close(by_embeds.last_hidden_state, theirs.last_hidden_state, minidl.float64, where=mask)


def test_dropout_in_training_only(mlm):
    model = models.BertForMaskedLM.from_pretrained(mlm[1])
    ids = minidl.from_numpy(batch()[0]["input_ids"].numpy())
    assert minidl.equal(model(ids).logits, model(ids).logits)
    model.train()
    assert not minidl.equal(model(ids).logits, model(ids).logits)


def test_from_pretrained_picks_the_architecture(mlm, base, tmp_path):
    assert type(models.from_pretrained(mlm[1])) is models.BertForMaskedLM
    assert type(models.from_pretrained(base[1])) is models.BertModel
    folder = shutil.copytree(base[1], tmp_path / "nameless")
    edit_config(folder, architectures=None)
    assert type(models.from_pretrained(folder)) is models.BertModel


def test_sharded_folder(mlm, tmp_path):
    model, _ = mlm
    folder = saved(model, tmp_path, max_shard_size="20KB")
    assert os.path.isfile(folder / "model.safetensors.index.json")
    inputs, _ = batch()
    ours = models.BertForMaskedLM.from_pretrained(folder, dtype=minidl.float64)(**to_minidl(inputs))
    with torch.no_grad():
        close(ours.logits, model.double()(**inputs).logits, minidl.float64)


def test_untied_decoder(tmp_path):
    model = build(transformers.BertForMaskedLM, tie_word_embeddings=False)
    ours = models.BertForMaskedLM.from_pretrained(saved(model, tmp_path), dtype=minidl.float64)
    assert ours.cls.predictions.decoder.weight is not ours.bert.embeddings.word_embeddings.weight
    inputs, _ = batch()
    with torch.no_grad():
        close(ours(**to_minidl(inputs)).logits, model.double()(**inputs).logits, minidl.float64)


def test_base_model_of_a_masked_lm_folder(mlm):
    model, folder = mlm
    with pytest.warns(UserWarning, match="pooler.dense.weight, pooler.dense.bias"):
        ours = models.BertModel.from_pretrained(folder, dtype=minidl.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        poolless = models.BertModel.from_pretrained(folder, dtype=minidl.float64, add_pooling_layer=False)
    inputs, _ = batch()
    with torch.no_grad():
        theirs = model.double().bert(**inputs).last_hidden_state
    close(ours(**to_minidl(inputs)).last_hidden_state, theirs, minidl.float64)
    out = poolless(**to_minidl(inputs))
    close(out.last_hidden_state, theirs, minidl.float64)
    assert out.pooler_output is None and "pooler.dense.weight" not in poolless.state_dict()


def test_masked_lm_of_a_base_folder_names_the_head(base):
    with pytest.raises(RuntimeError, match=r"missing cls\.predictions\.(bias|transform)") as info:
        models.BertForMaskedLM.from_pretrained(base[1])
    assert "unexpected" not in str(info.value) and "bert.embeddings" not in str(info.value)


def test_masked_lm_of_a_pretraining_folder(tmp_path):
    """Google's checkpoints hold BertForPreTraining's weights (pooler, next-sentence head), some under TensorFlow
    names (LayerNorm.gamma / .beta), and 4.x saved the position_ids buffer."""
    model = build(transformers.BertForPreTraining)
    folder = saved(model, tmp_path)
    from safetensors.torch import load_file, save_file
    state = load_file(folder / "model.safetensors")
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in state.items()}
    state["bert.embeddings.position_ids"] = torch.arange(TINY["max_position_embeddings"]).reshape(1, -1)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    ours = models.BertForMaskedLM.from_pretrained(folder, dtype=minidl.float64)
    inputs, _ = batch()
    with torch.no_grad():
        close(ours(**to_minidl(inputs)).logits, model.double()(**inputs).prediction_logits, minidl.float64)


def edit_config(folder, **changes):
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(changes)
    with open(path, "w") as f:
        json.dump({k: v for k, v in config.items() if v is not None}, f)
    return folder


@pytest.mark.parametrize("changes, message", [
    (dict(position_embedding_type="relative_key"), "position_embedding_type='relative_key'"),
    (dict(flash_attention_level=2), "'flash_attention_level'"),
    (dict(is_decoder=True), "is_decoder=True"),
    (dict(add_cross_attention=True), "add_cross_attention=True"),
    (dict(hidden_act="gelu_10"), "hidden_act='gelu_10'"),
    (dict(num_attention_heads=5), "num_attention_heads 5"),
    (dict(intermediate_size=40), r"intermediate\.dense\.weight: \[37, 32\] in the checkpoint, \[40, 32\]"),
    (dict(model_type="gpt2"), "model type 'gpt2'"),
])
def test_bad_config_is_named(base, tmp_path, changes, message):
    folder = edit_config(shutil.copytree(base[1], tmp_path / "bad"), **changes)
    with pytest.raises((ValueError, RuntimeError), match=message):
        models.BertModel.from_pretrained(folder)


def test_folder_without_weights(base, tmp_path):
    folder = shutil.copytree(base[1], tmp_path / "empty")
    os.remove(folder / "model.safetensors")
    with pytest.raises(FileNotFoundError, match="has no weights"):
        models.from_pretrained(folder)


def test_bad_inputs_are_named(base):
    model = models.BertModel.from_pretrained(base[1])
    ids = minidl.ones(1, 5, dtype=minidl.int64)
    with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
        model()
    with pytest.raises(ValueError, match="more than max_position_embeddings"):
        model(minidl.ones(1, TINY["max_position_embeddings"] + 1, dtype=minidl.int64))
    with pytest.raises(ValueError, match="attention_mask must be"):
        model(ids, attention_mask=minidl.ones(1, 4))


def test_activations_agree_with_transformers():
    x = torch.linspace(-6, 6, 101, dtype=torch.float64)
    for name, fn in ACTIVATIONS.items():
        ours = fn(minidl.from_numpy(x.numpy())).numpy()
        np.testing.assert_allclose(ours, transformers.activations.ACT2FN[name](x).numpy(), rtol=1e-12, atol=1e-14,
                                   err_msg=name)
