"""minidl.models.llama against transformers: tiny LLaMAs with random weights saved by transformers'
``save_pretrained`` and read by ``minidl.models.from_pretrained`` give transformers' logits (left padding, grouped-query
attention, tied embeddings, biases, llama3 and linear rope), continue from a cache as from the whole sequence, generate
transformers' greedy tokens, and train to transformers' losses and weights; configs they cannot compute are refused.

Tolerances: in float32 the two libraries' sums and cos/sin differ in the last bit: 1e-5 of the scale is asserted.
In float64 the oracle is patched (``float64_oracle``, in the float64 tests only): transformers' LLaMA rounds through
float32 even in a float64 model (LlamaRMSNorm normalises in float32, LlamaRotaryEmbedding computes its frequencies,
cos and sin in float32, its loss casts the logits to float32), which would bound the agreement at float32's ~1e-7,
whereas minidl's float64 model is float64 throughout. So LlamaRMSNorm.forward and LlamaRotaryEmbedding.forward are
replaced by the same formulas in the input's dtype (the frequencies recomputed in it), and the reference loss is
torch's F.cross_entropy on the float64 logits; the rest is transformers' own, and 1e-10 of the scale is asserted."""
import copy
import json
import math

import numpy as np
import pytest
import safetensors.torch
import torch
import transformers

import minidl
import minidl.models
from minidl.models import LlamaForCausalLM, LlamaModel

F32, F64 = 1e-5, 1e-10   # tolerances, as a fraction of the largest reference value
TINY = dict(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
VARIANTS = {
    "gqa": {},
    "tied": dict(tie_word_embeddings=True),
    "biases": dict(attention_bias=True, mlp_bias=True, num_key_value_heads=4, head_dim=16,
                   hidden_act="gelu_pytorch_tanh"),
    "llama3": dict(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 16}),
    "linear": dict(rope_parameters={"rope_type": "linear", "rope_theta": 1000.0, "factor": 4.0}),
}


def save(folder, seed=0, **overrides):
    """A transformers LLaMA with random weights (biases and norms too), saved to ``folder``; returns it, in eval."""
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**TINY, **overrides}))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    return model.eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """variant name -> (folder, transformers model), each saved once."""
    made = {}

    def get(name):
        if name not in made:
            folder = tmp_path_factory.mktemp(name)
            made[name] = folder, save(folder, **VARIANTS[name])
        return made[name]
    return get


def in_dtype(reference, dtype: str):
    """A copy of a shared transformers model in ``dtype`` (the shared one stays float32)."""
    return copy.deepcopy(reference).to(getattr(torch, dtype))


def md(t):
    return minidl.tensor(t.numpy())


def npy(t):
    """A torch or minidl tensor (or an array) as float64 numpy."""
    return np.asarray(t if isinstance(t, np.ndarray) else t.detach().numpy(), dtype=np.float64)


def assert_close(ours, reference, tol):
    ours, reference = npy(ours), npy(reference)
    assert ours.shape == reference.shape
    scale = max(np.abs(reference).max(), 1e-30)
    assert np.abs(ours - reference).max() <= tol * scale, np.abs(ours - reference).max() / scale


def batch(seed=1, rows=3, tokens=9, pads=(0, 3, 5)):
    """Token ids (rows, tokens) left-padded with the pad id 0 by ``pads`` tokens per row, and their mask."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, TINY["vocab_size"], (rows, tokens), generator=gen)
    mask = torch.ones(rows, tokens, dtype=torch.long)
    for row, pad in enumerate(pads):
        ids[row, :pad], mask[row, :pad] = 0, 0
    return ids, mask


def rms_norm_in_dtype(self, hidden_states):
    """transformers' LlamaRMSNorm.forward without its float32 round trip."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def inv_freq_in_dtype(config, dtype):
    """transformers' rotary frequencies (modeling_rope_utils: default, linear and llama3 rope) computed in ``dtype``."""
    params = config.rope_parameters
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    inv_freq = 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim))
    if params["rope_type"] == "linear":
        return inv_freq / params["factor"]
    if params["rope_type"] == "llama3":
        factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
        context = params["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        inv_freq = torch.where(wavelen > context / low, inv_freq / factor, inv_freq)
        smooth = (context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        return torch.where(~(wavelen < context / high) * ~(wavelen > context / low), smoothed, inv_freq)
    assert params["rope_type"] == "default", params
    return inv_freq


def rotary_in_dtype(self, x, position_ids):
    """transformers' LlamaRotaryEmbedding.forward with the frequencies, angles, cos and sin in the input's dtype."""
    freqs = position_ids[..., None].to(x.dtype) * inv_freq_in_dtype(self.config, x.dtype).to(x.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling


def float64_oracle(monkeypatch):
    """transformers' LLaMA computing its norms and rotary tables in the model's dtype (see the module docstring)."""
    llama = transformers.models.llama.modeling_llama
    monkeypatch.setattr(llama.LlamaRMSNorm, "forward", rms_norm_in_dtype)
    monkeypatch.setattr(llama.LlamaRotaryEmbedding, "forward", rotary_in_dtype)


def reference_loss(logits, labels):
    """The shifted next-token loss by torch's F.cross_entropy in the logits' dtype (transformers' casts to float32)."""
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())


def generate_positions(mask):
    """The position ids transformers' generate gives a left-padded prompt: counted over the tokens only."""
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)


# ------------------------------------------------------------------------------- loading and logits
def test_from_pretrained_picks_the_class_and_keeps_transformers_names(saved):
    folder, reference = saved("tied")
    model = minidl.models.from_pretrained(folder)
    assert type(model) is LlamaForCausalLM and not model.training
    assert set(model.state_dict()) == set(reference.state_dict())
    assert model.lm_head.weight is model.model.embed_tokens.weight
    base = LlamaModel.from_pretrained(folder)
    assert set(base.state_dict()) == set(reference.model.state_dict())
    ids, mask = batch()
    with torch.no_grad():
        expected = reference.model(ids, attention_mask=mask).last_hidden_state
    got = base(md(ids), attention_mask=md(mask)).last_hidden_state
    keep = mask.bool().numpy()
    assert_close(npy(got)[keep], npy(expected)[keep], F32)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_logits_match_transformers_with_left_padding(saved, monkeypatch, variant, dtype):
    if dtype == "float64":
        float64_oracle(monkeypatch)
    folder, reference = saved(variant)
    reference = in_dtype(reference, dtype)
    model = minidl.models.from_pretrained(folder, dtype=getattr(minidl, dtype))
    assert model.lm_head.weight.dtype is getattr(minidl, dtype)
    ids, mask = batch()
    keep = mask.bool().numpy()
    tol = F32 if dtype == "float32" else F64
    for positions in (None, generate_positions(mask)):   # forward's default (padding counted), generate's
        with torch.no_grad():
            expected = reference(ids, attention_mask=mask, position_ids=positions).logits
        got = model(md(ids), attention_mask=md(mask),
                    position_ids=None if positions is None else md(positions)).logits
        assert got.dtype is getattr(minidl, dtype)
        assert_close(npy(got)[keep], npy(expected)[keep], tol)
    with torch.no_grad():
        expected = reference(ids[:1]).logits
    assert_close(model(md(ids[:1])).logits, expected, tol)


def test_rms_norm_normalises_in_float32_as_transformers_so_bfloat16_agrees_bit_for_bit():
    torch.manual_seed(0)
    reference = transformers.models.llama.modeling_llama.LlamaRMSNorm(32, eps=1e-6)
    with torch.no_grad():
        reference.weight.add_(torch.randn(32) * 0.1)
    reference = reference.to(torch.bfloat16)
    norm = minidl.models.llama.LlamaRMSNorm(32, 1e-6).to(minidl.bfloat16)
    with minidl.no_grad():
        norm.weight.copy_(md(reference.weight.detach().float()))
    x = (torch.randn(64, 32) * 3).to(torch.bfloat16)
    got = norm(md(x.float()).to(minidl.bfloat16))
    np.testing.assert_array_equal(npy(got.float()), npy(reference(x).float()))
    plain = minidl.nn.RMSNorm(32, eps=1e-6).to(minidl.bfloat16)   # (which scales in bfloat16: not the same)
    with minidl.no_grad():
        plain.weight.copy_(norm.weight)
    assert (npy(plain(md(x.float()).to(minidl.bfloat16)).float()) != npy(got.float())).any()


def test_inputs_embeds_and_logits_to_keep_as_transformers(saved):
    folder, reference = saved("gqa")
    model = minidl.models.from_pretrained(folder)
    ids, mask = batch()
    embeds = reference.model.embed_tokens(ids).detach()
    with torch.no_grad():
        expected = reference(inputs_embeds=embeds, attention_mask=mask, logits_to_keep=2).logits
    got = model(inputs_embeds=md(embeds), attention_mask=md(mask), logits_to_keep=2).logits
    assert_close(got, expected, F32)
    with torch.no_grad():
        expected = reference(ids, logits_to_keep=torch.tensor([0, 4])).logits
    assert_close(model(md(ids), logits_to_keep=minidl.tensor([0, 4])).logits, expected, F32)
    with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
        model(md(ids), inputs_embeds=md(embeds))


def test_transformers_4_configs_rope_theta_and_rope_scaling_are_read(saved, tmp_path):
    folder, reference = saved("linear")
    config = json.loads((folder / "config.json").read_text())
    params = config.pop("rope_parameters")
    config.update(rope_theta=params["rope_theta"], rope_scaling={"type": "linear", "factor": params["factor"]})
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    model = minidl.models.from_pretrained(tmp_path)
    ids, _ = batch()
    with torch.no_grad():
        expected = reference(ids).logits
    assert_close(model(md(ids)).logits, expected, F32)
    config.update(rope_scaling=None)   # transformers 4's plain rope: rope_theta only
    (tmp_path / "config.json").write_text(json.dumps(config))
    plain = minidl.models.from_pretrained(tmp_path)
    assert not np.allclose(npy(plain(md(ids)).logits), npy(expected), atol=1e-3)


def test_the_rotary_frequencies_old_checkpoints_hold_are_dropped(saved, tmp_path):
    folder, reference = saved("gqa")
    state = {k: v.contiguous() for k, v in reference.state_dict().items()}
    for i in range(TINY["num_hidden_layers"]):   # as transformers before 4.31 saved them
        state[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = reference.model.rotary_emb.inv_freq.clone()
    safetensors.torch.save_file(state, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    ids, _ = batch()
    with torch.no_grad():
        expected = reference(ids).logits
    assert_close(minidl.models.from_pretrained(tmp_path)(md(ids)).logits, expected, F32)


# ------------------------------------------------------------------------------- cache and generate
@pytest.mark.parametrize("variant", ["gqa", "llama3"])
def test_a_cached_prefix_and_one_token_equal_the_whole_sequence_and_transformers_cached_step(saved, monkeypatch,
                                                                                              variant):
    float64_oracle(monkeypatch)
    folder, reference = saved(variant)
    reference = in_dtype(reference, "float64")
    model = minidl.models.from_pretrained(folder, dtype=minidl.float64)
    ids, mask = batch()
    positions = generate_positions(mask)
    with torch.no_grad():
        before = reference(ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
                           use_cache=True).past_key_values
        expected = reference(ids[:, -1:], attention_mask=mask, position_ids=positions[:, -1:], past_key_values=before)
    ids, mask, positions = md(ids), md(mask), md(positions)
    whole = model(ids, attention_mask=mask, position_ids=positions)
    prefix = model(ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1], use_cache=True)
    assert prefix.cache.get_seq_length() == 8 and len(prefix.cache) == 2
    last = model(ids[:, -1:], attention_mask=mask, position_ids=positions[:, -1:], cache=prefix.cache)
    assert_close(last.logits[:, 0], whole.logits[:, -1], F64)
    assert_close(last.logits, expected.logits, F64)
    for layer, theirs in zip(last.cache.layers, expected.past_key_values.layers):
        assert_close(layer.keys, theirs.keys, F64)
        assert_close(layer.values, theirs.values, F64)
    assert last.cache is prefix.cache and last.cache.get_seq_length() == 9
    plain = model(ids[:1, :4])   # no mask, default positions: continues after the cache's length
    step = model(ids[:1, 4:5], past_key_values=plain.cache)   # (transformers 4's name for the cache)
    assert_close(step.logits[:, 0], model(ids[:1, :5]).logits[:, -1], F64)
    with pytest.raises(ValueError, match="not both"):
        model(ids[:1, 4:5], cache=plain.cache, past_key_values=plain.cache)


@pytest.mark.parametrize("variant,dtype", [("gqa", "float64"), ("llama3", "float32")])
def test_greedy_generate_gives_transformers_tokens(saved, monkeypatch, variant, dtype):
    if dtype == "float64":
        float64_oracle(monkeypatch)
    folder, reference = saved(variant)
    reference = in_dtype(reference, dtype)
    model = minidl.models.from_pretrained(folder, dtype=getattr(minidl, dtype))
    ids, mask = batch(seed=5, tokens=6, pads=(0, 2, 4))
    settings = transformers.GenerationConfig(do_sample=False, max_new_tokens=20, pad_token_id=0, eos_token_id=2,
                                             bos_token_id=1)   # (all of it: nothing from the folder's defaults)
    expected = reference.generate(ids, attention_mask=mask, generation_config=settings).numpy()
    assert variant != "gqa" or (expected[2, 6:] == 0).sum() > 5   # (there, a row ends early: eos, then padding)
    got = model.generate(md(ids), attention_mask=md(mask), max_new_tokens=20).numpy()
    np.testing.assert_array_equal(got, expected)
    no_cache = model.generate(md(ids), attention_mask=md(mask), max_new_tokens=20, use_cache=False).numpy()
    np.testing.assert_array_equal(no_cache, expected)


# ------------------------------------------------------------------------------- training
@pytest.mark.parametrize("optimizer,settings", [
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("AdamW", dict(lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1))])
def test_training_steps_give_transformers_losses_and_weights(saved, monkeypatch, optimizer, settings):
    """float64, against the patched oracle trained on ``reference_loss``. AdamW divides each gradient by its running
    RMS, which magnifies rounding where gradients are tiny: its weights agree to ~2e-14 of the scale after 4 steps
    (SGD's to ~5e-16), still well within F64."""
    float64_oracle(monkeypatch)
    folder, _ = saved("tied")
    reference = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float64).train()
    model = minidl.models.from_pretrained(folder, dtype=minidl.float64).train()
    ref_opt = getattr(torch.optim, optimizer)(reference.parameters(), **settings)
    opt = getattr(minidl.optim, optimizer)(model.parameters(), **settings)
    gen = torch.Generator().manual_seed(3)
    for _ in range(4):
        ids = torch.randint(0, TINY["vocab_size"], (2, 12), generator=gen)
        labels = ids.clone()
        labels[0, :3] = -100
        mask = torch.ones_like(ids)
        mask[1, :2] = 0
        ref_loss = reference_loss(reference(ids, attention_mask=mask).logits, labels)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        loss = model(md(ids), attention_mask=md(mask), labels=md(labels)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert abs(loss.item() - ref_loss.item()) <= F64 * abs(ref_loss.item())
    ours = model.state_dict()
    for name, value in reference.state_dict().items():
        assert_close(ours[name], value, F64)
    assert model.lm_head.weight is model.model.embed_tokens.weight


# ------------------------------------------------------------------------------- what is refused
def edited(folder, tmp_path, **changes):
    """A copy of a saved folder whose config.json has ``changes`` (None: the field removed)."""
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    (tmp_path / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    return tmp_path


@pytest.mark.parametrize("changes,error,match", [
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}), ValueError,
     "rope_type 'yarn' is not supported"),
    (dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4}), ValueError, "needs rope_parameters 'factor'"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "beta_fast": 32}), ValueError,
     "'beta_fast' are not supported"),
    (dict(rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}), ValueError,
     "'partial_rotary_factor' are not supported"),
    (dict(sliding_window=16), ValueError, "'sliding_window' are not supported"),
    (dict(num_key_value_heads=3), ValueError, r"num_attention_heads \(4\) is not divisible by num_key_value_heads"),
    (dict(hidden_act="laplace"), ValueError, "hidden_act='laplace' is not supported"),
    (dict(pretraining_tp=2), ValueError, "pretraining_tp 2"),
    (dict(intermediate_size=48), RuntimeError, r"model.layers.0.mlp.gate_proj.weight: \[64, 32\] in the checkpoint, "
                                               r"\[48, 32\] from the config"),
    (dict(num_key_value_heads=4), RuntimeError, r"self_attn.k_proj.weight: \[16, 32\] in the checkpoint"),
    (dict(model_type="gpt2"), ValueError, "model type 'gpt2'"),
])
def test_configs_it_cannot_compute_are_refused_by_name(saved, tmp_path, changes, error, match):
    folder, _ = saved("gqa")
    with pytest.raises(error, match=match):
        LlamaForCausalLM.from_pretrained(edited(folder, tmp_path, **changes))
