"""minidl.models.gpt2 against transformers (the oracle): tiny GPT-2s with random weights, saved by transformers'
``save_pretrained`` and read by ``from_pretrained``; logits, the cache path, greedy generation, the loss and its
gradients, the folder layouts transformers and OpenAI's checkpoints use, and the errors for what does not fit
(sampling and generate's settings: tests/test_models_generation.py)."""
import json
import os
import shutil

import numpy as np
import pytest

import minidl
from minidl import models
from minidl.models import GPT2LMHeadModel, GPT2Model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

BASE = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2,
            pad_token_id=0, initializer_range=0.2)
VARIANT = dict(BASE, scale_attn_by_inverse_layer_idx=True, n_inner=48, activation_function="gelu_pytorch_tanh",
               layer_norm_epsilon=1e-3, tie_word_embeddings=False, reorder_and_upcast_attn=True)


def reference(config: dict, seed: int = 0):
    """transformers' GPT2LMHeadModel with random weights (biases and norms too), in eval mode."""
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module", params=["base", "variant"])
def pair(request, tmp_path_factory):
    """(transformers' model, its folder)."""
    model = reference(BASE if request.param == "base" else VARIANT)
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    return model, folder


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    model = reference(BASE)
    folder = tmp_path_factory.mktemp("base")
    model.save_pretrained(folder)
    return model, folder


def ours(t):
    return minidl.tensor(t.numpy())


def close(actual, expected, rel):
    actual = actual.detach().numpy() if isinstance(actual, minidl.Tensor) else np.asarray(actual)
    expected = expected.detach().numpy()
    assert actual.shape == expected.shape
    err, scale = np.abs(actual - expected).max(), np.abs(expected).max()
    assert err <= rel * scale, f"max error {err:.3g} at scale {scale:.3g}"


def left_padded():
    """A batch of three prompts, two left-padded: ids, attention_mask and the positions transformers' generate gives
    (counted over the tokens only)."""
    torch.manual_seed(1)
    ids = torch.randint(3, 99, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    mask[2, :1] = 0
    ids = ids.masked_fill(mask == 0, 0)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return ids, mask, positions


def test_logits_float32(pair):
    reference_model, folder = pair
    model = models.from_pretrained(folder)
    assert isinstance(model, GPT2LMHeadModel) and not model.training
    ids, mask, positions = left_padded()
    with torch.no_grad():
        plain = reference_model(ids).logits
        padded = reference_model(ids, attention_mask=mask, position_ids=positions).logits
        default_positions = reference_model(ids, attention_mask=mask).logits
    close(model(ours(ids)).logits, plain, 1e-4)
    keep = mask.bool().numpy()
    got = model(ours(ids), attention_mask=ours(mask), position_ids=ours(positions)).logits.detach().numpy()
    close(got[keep], padded[mask.bool()], 1e-4)
    got = model(ours(ids), attention_mask=ours(mask)).logits.detach().numpy()   # positions 0.. over the padding too
    close(got[keep], default_positions[mask.bool()], 1e-4)


def test_logits_float64(pair):
    reference_model, folder = pair
    model = GPT2LMHeadModel.from_pretrained(folder, dtype=minidl.float64)
    assert model.transformer.wte.weight.dtype is minidl.float64
    ids, mask, positions = left_padded()
    with torch.no_grad():
        expected = reference_model.double()(ids, attention_mask=mask, position_ids=positions).logits
        reference_model.float()
    got = model(ours(ids), attention_mask=ours(mask), position_ids=ours(positions)).logits.detach().numpy()
    close(got[mask.bool().numpy()], expected[mask.bool()], 1e-10)


def test_base_model_hidden_states(base):
    reference_model, folder = base
    model = GPT2Model.from_pretrained(folder)
    ids = left_padded()[0][1:2]
    with torch.no_grad():
        expected = reference_model.transformer(ids).last_hidden_state
    out = model(ours(ids))
    close(out.last_hidden_state, expected, 1e-4)
    assert out.cache.get_seq_length() == 12 and model(ours(ids), use_cache=False).cache is None


def test_cache_step_equals_full_forward_and_transformers_cached_step(base):
    reference_model, folder = base
    model = GPT2LMHeadModel.from_pretrained(folder)
    ids, mask, positions = left_padded()
    with torch.no_grad():
        before = reference_model(ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
                                 use_cache=True).past_key_values
        expected = reference_model(ids[:, -1:], attention_mask=mask, position_ids=positions[:, -1:],
                                   past_key_values=before)
    ids, mask, positions = ours(ids), ours(mask), ours(positions)
    full = model(ids, attention_mask=mask, position_ids=positions).logits
    prefix = model(ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1], use_cache=True)
    assert prefix.cache.get_seq_length() == 11
    step = model(ids[:, -1:], cache=prefix.cache, attention_mask=mask, position_ids=positions[:, -1:])
    close(step.logits[:, 0], full[:, -1], 1e-5)
    close(step.logits, expected.logits, 1e-4)
    for layer, theirs in zip(step.cache.layers, expected.past_key_values.layers):
        close(layer.keys, theirs.keys, 1e-5)
        close(layer.values, theirs.values, 1e-5)
    assert step.cache is prefix.cache and step.cache.get_seq_length() == 12
    # default positions count on from the cache; transformers 4's past_key_values names the same cache
    plain = model(ids[:, :5]).logits
    first = model(ids[:, :3])
    again = model(ids[:, 3:5], past_key_values=first.cache).logits
    close(again, plain[:, 3:5], 1e-5)


def test_logits_to_keep_an_int_or_a_tensor_of_positions_as_transformers(base):
    reference_model, folder = base
    model = GPT2LMHeadModel.from_pretrained(folder)
    ids = left_padded()[0]
    for keep in (0, 1, 5, torch.tensor([0, 3, 11])):
        with torch.no_grad():
            expected = reference_model(ids, logits_to_keep=keep).logits
        close(model(ours(ids), logits_to_keep=ours(keep) if isinstance(keep, torch.Tensor) else keep).logits,
              expected, 1e-4)


def test_greedy_generate_matches_transformers(base):
    reference_model, folder = base
    model = GPT2LMHeadModel.from_pretrained(folder, dtype=minidl.float64)
    ids, mask, _ = left_padded()
    with torch.no_grad():
        expected = reference_model.double().generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=20)
        reference_model.float()
    got = model.generate(ours(ids), attention_mask=ours(mask), max_new_tokens=20)
    assert got.shape[1] == 32
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    no_cache = model.generate(ours(ids), attention_mask=ours(mask), max_new_tokens=20, use_cache=False)
    np.testing.assert_array_equal(no_cache.numpy(), expected.numpy())
    # an end-of-sequence id the first prompt reaches early: that sequence is padded with pad_token_id from there on
    eos = int(expected[0, 17])
    with torch.no_grad():
        expected = reference_model.double().generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=20,
                                                     eos_token_id=eos)
        reference_model.float()
    assert (expected[0, 18:] == BASE["pad_token_id"]).all()
    got = model.generate(ours(ids), attention_mask=ours(mask), max_new_tokens=20, eos_token_id=eos)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_sharded_and_bin_folders(base, tmp_path):
    reference_model, folder = base
    ids = left_padded()[0]
    with torch.no_grad():
        expected = reference_model(ids).logits
    sharded = tmp_path / "sharded"
    reference_model.save_pretrained(sharded, max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").is_file() and not (sharded / "model.safetensors").exists()
    close(models.from_pretrained(sharded)(ours(ids)).logits, expected, 1e-4)
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    shutil.copy(folder / "config.json", bin_folder)
    torch.save(reference_model.state_dict(), bin_folder / "pytorch_model.bin")
    close(models.from_pretrained(bin_folder)(ours(ids)).logits, expected, 1e-4)


def test_openai_checkpoint_layout(base, tmp_path):
    """OpenAI's converted checkpoints (gpt2, gpt2-medium, ...) hold the base model's names (no ``transformer.``, no
    ``lm_head``) and each layer's causal-mask buffers ``attn.bias`` / ``attn.masked_bias``."""
    reference_model, folder = base
    state = {k: v.contiguous() for k, v in reference_model.transformer.state_dict().items()}
    for i in range(BASE["n_layer"]):
        state[f"h.{i}.attn.bias"] = torch.ones(1, 1, 64, 64).tril()
        state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    shutil.copy(folder / "config.json", tmp_path)
    safetensors_torch.save_file(state, str(tmp_path / "model.safetensors"))
    ids = left_padded()[0]
    with torch.no_grad():
        expected = reference_model(ids).logits
    close(GPT2LMHeadModel.from_pretrained(tmp_path)(ours(ids)).logits, expected, 1e-4)


def test_training_loss_and_gradients(base):
    reference_model, folder = base
    model = GPT2LMHeadModel.from_pretrained(folder, dtype=minidl.float64)
    ids, mask, positions = left_padded()
    labels = ids.masked_fill(mask == 0, -100)
    reference_model.double()
    out_t = reference_model(ids, attention_mask=mask, position_ids=positions, labels=labels)
    out_t.loss.backward()
    out = model(ours(ids), attention_mask=ours(mask), position_ids=ours(positions), labels=ours(labels))
    out.loss.backward()
    # transformers scores float64 logits in float32; minidl keeps float64: the same loss to float32's precision,
    # and to float64's against torch's cross entropy of transformers' float64 logits
    assert out.loss.dtype is minidl.float64
    np.testing.assert_allclose(out.loss.item(), out_t.loss.item(), rtol=1e-6)
    logits = out_t.logits.detach()
    exact = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 99), labels[:, 1:].reshape(-1))
    np.testing.assert_allclose(out.loss.item(), exact.item(), rtol=1e-10)
    for name in ("transformer.wte.weight", "transformer.h.1.attn.c_attn.weight", "transformer.h.0.mlp.c_fc.bias"):
        close(model.get_parameter(name).grad, reference_model.get_parameter(name).grad, 1e-5)
    reference_model.zero_grad()
    reference_model.float()


def test_built_from_a_config_initialised_as_gpt2_and_trains():
    config = GPT2LMHeadModel.config_from_dict(dict(BASE, initializer_range=0.02, n_layer=8))
    minidl.manual_seed(0)
    model = GPT2LMHeadModel(config)
    assert model.lm_head.weight is model.transformer.wte.weight
    stds = {name: float(p.std()) for name, p in model.named_parameters() if p.ndim == 2}
    assert all(0.015 < std < 0.025 for name, std in stds.items() if not name.endswith("c_proj.weight"))
    assert all(0.003 < std < 0.007 for name, std in stds.items() if name.endswith("c_proj.weight"))   # 0.02 / 4
    ids = minidl.randint(3, 99, (4, 16))
    optimizer = minidl.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5


def test_dropout_in_training_only(base):
    model = GPT2LMHeadModel.from_pretrained(base[1])
    ids = ours(left_padded()[0])
    evals = [model(ids).logits.detach().numpy() for _ in range(2)]
    np.testing.assert_array_equal(*evals)
    model.train()
    minidl.manual_seed(0)
    trained = model(ids).logits.detach().numpy()
    assert not np.allclose(trained, evals[0])


def edited_config(folder, config_changes=(), remove=()):
    """The config.json of a folder, edited."""
    config = json.loads((folder / "config.json").read_text())
    config.update(config_changes)
    for key in remove:
        config.pop(key)
    return config


@pytest.mark.parametrize("changes, message", [
    ({"activation_function": "laplace"}, "activation_function='laplace'"),
    ({"frobnicate": 3}, "'frobnicate'"),
    ({"add_cross_attention": True}, "add_cross_attention"),
    ({"n_embd": 30}, "n_embd=30 is not a multiple of n_head=4"),
    ({"model_type": "bert", "architectures": ["BertModel"]}, "model type 'bert'"),
])
def test_bad_configs(base, tmp_path, changes, message):
    config = edited_config(base[1], changes)
    (tmp_path / "config.json").write_text(json.dumps(config))
    shutil.copy(base[1] / "model.safetensors", tmp_path)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        GPT2LMHeadModel.from_pretrained(tmp_path)


def test_bad_folders(base, tmp_path):
    folder = base[1]
    shutil.copy(folder / "config.json", tmp_path)
    with pytest.raises(FileNotFoundError, match="has no weights"):
        models.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(edited_config(folder, {"n_embd": 48})))
    shutil.copy(folder / "model.safetensors", tmp_path)
    with pytest.raises(RuntimeError, match=r"transformer.wte.weight: \[99, 32\] in the checkpoint, \[99, 48\]"):
        models.from_pretrained(tmp_path)
    t5 = edited_config(folder, {"model_type": "t5"}, remove=["architectures"])
    (tmp_path / "config.json").write_text(json.dumps(t5))
    with pytest.raises(ValueError, match="'t5' model"):
        models.from_pretrained(tmp_path)
    os.remove(tmp_path / "model.safetensors")
    safetensors_torch.save_file({"wte.weight": torch.zeros(99, 32)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(edited_config(folder)))
    with pytest.raises(RuntimeError, match="missing transformer.wpe.weight"):
        models.from_pretrained(tmp_path)


def test_bad_inputs(base):
    model = GPT2LMHeadModel.from_pretrained(base[1])
    with pytest.raises(ValueError, match="exceed n_positions=64"):
        model(minidl.zeros(1, 65, dtype=minidl.int64))
    with pytest.raises(ValueError, match=r"input_ids must be \(batch, tokens\)"):
        model(minidl.zeros(5, dtype=minidl.int64))
    with pytest.raises(ValueError, match="input_ids or inputs_embeds"):
        model()
    with pytest.raises(ValueError, match="not both"):
        model(minidl.zeros(1, 2, dtype=minidl.int64), cache=models.DynamicCache(),
              past_key_values=models.DynamicCache())
    with pytest.raises(ValueError, match="labels must be"):
        model(minidl.zeros(1, 4, dtype=minidl.int64), labels=minidl.zeros(1, 3, dtype=minidl.int64))
