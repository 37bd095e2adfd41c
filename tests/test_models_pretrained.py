"""minidl.models.from_pretrained's folder handling, with transformers 5.24 writing the folders: the dtype it builds
in ("auto": the config's, else the weights'), architectures it lacks refused by name, and the config fields that
real Hub configs carry (inert ones accepted, ones that would change the outputs refused by name)."""
import json

import numpy as np
import pytest

import minidl
import minidl.models

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def tiny_bert(**overrides):
    return transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=20, max_position_embeddings=16, **overrides)


def save(model, folder, edit=None):
    model.save_pretrained(folder)
    if edit:
        path = folder / "config.json"
        config = json.loads(path.read_text())
        edit(config)
        path.write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("stored", ["bfloat16", "float16"])
def test_auto_dtype_is_the_configs_else_the_weights(tmp_path, stored):
    torch.manual_seed(0)
    theirs = transformers.BertModel(tiny_bert()).to(getattr(torch, stored))
    with_dtype = save(theirs, tmp_path / "with")
    assert json.loads((with_dtype / "config.json").read_text())["dtype"] == stored
    assert minidl.models.from_pretrained(with_dtype).pooler.dense.weight.dtype == getattr(minidl, stored)
    without = save(theirs, tmp_path / "without", edit=lambda c: c.pop("dtype"))
    assert minidl.models.from_pretrained(without).pooler.dense.weight.dtype == getattr(minidl, stored)
    assert minidl.models.from_pretrained(without, dtype="float64").pooler.dense.weight.dtype == minidl.float64
    with pytest.raises(ValueError, match="dtype 'float7' .* is not a floating-point dtype"):
        minidl.models.from_pretrained(without, dtype="float7")


def test_an_architecture_minidl_lacks_is_named(tmp_path):
    torch.manual_seed(0)
    folder = save(transformers.BertForSequenceClassification(tiny_bert()), tmp_path)
    with pytest.raises(ValueError, match="BertForSequenceClassification, which minidl.models lacks.*BertModel"):
        minidl.models.from_pretrained(folder)
    body = minidl.models.BertModel.from_pretrained(folder)      # the base model reads the body, as the error says
    theirs = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    ids = np.arange(10).reshape(2, 5)
    with torch.no_grad():
        want = theirs.bert(torch.from_numpy(ids)).last_hidden_state.numpy()
    got = body(minidl.from_numpy(ids)).last_hidden_state.detach().numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_hub_config_fields_that_change_nothing_load(tmp_path):
    """bert-base-multilingual-cased's config carries directionality and pooler_* fields; fine-tuning tools add
    fields starting with "_"; transformers 4 kept generate's defaults in config.json."""
    def add(config):
        config.update(directionality="bidi", pooler_fc_size=768, pooler_num_attention_heads=12, pooler_num_fc_layers=3,
                      pooler_size_per_head=128, pooler_type="first_token_transform", output_past=True,
                      _attn_implementation_autoset=True, max_length=20, num_beams=1)
    torch.manual_seed(0)
    minidl.models.from_pretrained(save(transformers.BertModel(tiny_bert()), tmp_path, edit=add))


@pytest.mark.parametrize("field, value", [("output_hidden_states", True), ("output_attentions", True),
                                          ("pruned_heads", {"0": [1]})])
def test_fields_that_would_change_the_outputs_are_refused(tmp_path, field, value):
    torch.manual_seed(0)
    folder = save(transformers.BertModel(tiny_bert()), tmp_path, edit=lambda c: c.update({field: value}))
    with pytest.raises(ValueError, match=f"{field}="):
        minidl.models.from_pretrained(folder)
