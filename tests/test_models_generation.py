"""minidl.models.generation and minidl.models.cache against transformers 5.24 (the oracle): tiny GPT-2s and LLaMAs
with random weights saved by transformers' ``save_pretrained``; generate's length rules and errors, the defaults a
folder's generation_config.json (else its config.json) sets, the settings minidl cannot compute (loaded, refused when
they would apply), the attention mask inferred from the pad token, the positions a model embeds, the sampler's
distribution against transformers' warpers, and DynamicCache's methods on the same tensors as transformers' own
(a model's cached step against transformers': tests/test_models_gpt2.py, tests/test_models_llama.py).

Sampling is checked by distribution: 4000 seeded draws, Pearson's chi-square against transformers' probabilities
(cells expected under 5 draws pooled) below its 1 - 1e-6 quantile; each test also shows that the draws reject a
wrongly warped distribution, so a wrong warping fails."""
import json
import math
import shutil

import numpy as np
import pytest

import minidl
import minidl.models
from minidl.models import DynamicCache
from minidl.models.generation import GenerationConfig, sample, warp

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

GPT2 = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2,
            pad_token_id=0, initializer_range=0.2)
LLAMA = dict(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
# GPT-2 compared in float64 (transformers' GPT-2 is float64 throughout); LLaMA in float32, where transformers' float32
# norms and rotary tables are minidl's too
DTYPES = {"gpt2": "float64", "llama": "float32"}
DRAWS = 4000


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def family(request, tmp_path_factory):
    """(family name, its folder as transformers saves it)."""
    torch.manual_seed(0)
    if request.param == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    return request.param, folder


def load(name, folder, dtype=None):
    """(transformers' model, minidl's) read from ``folder``, in ``dtype`` (default: the family's)."""
    dtype = dtype or DTYPES[name]
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
    return theirs, minidl.models.from_pretrained(folder, dtype=dtype)


def edited(folder, tmp_path, generation=None, config=None, drop_generation=False):
    """A copy of ``folder`` with its generation_config.json (dropped, or updated by ``generation``) and config.json
    (updated by ``config``) edited."""
    copy = tmp_path / "edited"
    shutil.copytree(folder, copy)
    for name, changes in (("generation_config.json", generation), ("config.json", config)):
        if changes:
            data = json.loads((copy / name).read_text())
            data.update(changes)
            (copy / name).write_text(json.dumps(data))
    if drop_generation:
        (copy / "generation_config.json").unlink()
    return copy


def prompts(seed=1, rows=3, tokens=8):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, 99, (rows, tokens), generator=gen)


def md(t):
    return minidl.tensor(t.numpy())


def same_tokens(theirs, ours, ids, **kwargs):
    """generate's ids from both, asserted equal; transformers'."""
    with torch.no_grad():
        expected = theirs.generate(ids, **kwargs).numpy()
    got = ours.generate(md(ids), **{k: md(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})
    np.testing.assert_array_equal(got.numpy(), expected)
    return expected


# ------------------------------------------------------------------------------- lengths
def test_without_a_length_20_new_tokens_capped_by_the_models_positions(family):
    theirs, ours = load(*family)
    assert same_tokens(theirs, ours, prompts()).shape == (3, 28)
    assert same_tokens(theirs, ours, prompts(rows=1, tokens=50)).shape == (1, 64)   # min(50 + 20, 64)
    assert same_tokens(theirs, ours, prompts(), max_length=12).shape == (3, 12)     # max_length: the total
    assert same_tokens(theirs, ours, prompts(), max_new_tokens=3, max_length=30).shape == (3, 11)


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_new_tokens=0), "max_new_tokens` must be greater than 0, but is 0"),
    (dict(max_new_tokens=-2), "max_new_tokens` must be greater than 0, but is -2"),
    (dict(max_length=5), "Input length of input_ids is 8, but `max_length` is set to 5"),
    (dict(max_length=8), "Input length of input_ids is 8, but `max_length` is set to 8")])
def test_lengths_transformers_refuses_are_refused(family, kwargs, message):
    theirs, ours = load(*family)
    with pytest.raises(ValueError, match=message):
        theirs.generate(prompts(), **kwargs)
    with pytest.raises(ValueError, match=message.replace("`", "").replace("Input", "input")):
        ours.generate(md(prompts()), **kwargs)


def test_a_prompt_filling_the_positions_is_refused_as_transformers_refuses_it(family):
    theirs, ours = load(*family)
    with pytest.raises(ValueError, match="Input length of input_ids is 64, but `max_length` is set to 64"):
        theirs.generate(prompts(rows=1, tokens=64))
    with pytest.raises(ValueError, match="input length of input_ids is 64, but max_length is set to 64"):
        ours.generate(md(prompts(rows=1, tokens=64)))


def test_new_tokens_beyond_gpt2s_positions_are_refused_up_front_rotary_ones_run_on(family):
    theirs, ours = load(*family)
    ids = prompts(rows=1)
    if family[0] == "llama":   # rotary positions: transformers runs past max_position_embeddings, and so does minidl
        assert same_tokens(theirs, ours, ids, max_new_tokens=70).shape == (1, 78)
        return
    assert same_tokens(theirs, ours, ids, max_new_tokens=57).shape == (1, 65)   # positions 0..63 fed
    with pytest.raises(IndexError):
        theirs.generate(ids, max_new_tokens=58)
    with pytest.raises(ValueError, match=r"8 prompt tokens and 58 new ones need 65 positions, beyond "
                                         r"GPT2LMHeadModel's n_positions=64 \(at most 57 new tokens fit\)"):
        ours.generate(md(ids), max_new_tokens=58)
    padded, mask = prompts(rows=2), torch.ones(2, 8, dtype=torch.long)   # left padding takes no position
    mask[0, :2], mask[1, :3] = 0, 0
    assert same_tokens(theirs, ours, padded, attention_mask=mask, max_new_tokens=59).shape == (2, 67)
    with pytest.raises(ValueError, match="6 prompt tokens and 60 new ones need 65 positions"):
        ours.generate(md(padded), attention_mask=md(mask), max_new_tokens=60)


def test_each_step_computes_the_last_positions_logits_only(family):
    _, ours = load(*family)
    fed = []
    ours.lm_head.register_forward_hook(lambda module, args, output: fed.append(args[0].shape[1]))
    for use_cache in (True, False):
        ours.generate(md(prompts()), max_new_tokens=4, use_cache=use_cache, eos_token_id=[])
    assert fed == [1] * 8


# ------------------------------------------------------------------------------- the folder's defaults
def test_generation_config_json_sets_the_defaults_eos_lists_included(family, tmp_path):
    name, folder = family
    theirs, _ = load(name, folder)
    ids = prompts()
    with torch.no_grad():
        free = theirs.generate(ids, max_new_tokens=10, eos_token_id=None)[:, 8:]
    stop = next(int(t) for t in free[0, 2:] if int(t) not in (0, 2))   # a token row 0 reaches, another id ends on
    theirs, ours = load(name, edited(folder, tmp_path, generation=dict(eos_token_id=[2, stop], max_new_tokens=10)))
    assert ours.generation_config.eos_token_id == [2, stop] and ours.generation_config.max_new_tokens == 10
    expected = same_tokens(theirs, ours, ids)
    assert expected.shape == (3, 18) and (expected[0, -1] == 0)   # row 0 ended, padded
    same_tokens(theirs, ours, ids, max_new_tokens=4)               # an argument overrides the folder
    same_tokens(theirs, ours, ids, eos_token_id=stop, pad_token_id=5)


def test_config_json_generation_fields_are_the_fallback(family, tmp_path):
    name, folder = family
    theirs, ours = load(name, edited(folder, tmp_path, config=dict(max_length=12), drop_generation=True))
    assert ours.generation_config.max_length == 12 and theirs.generation_config.max_length == 12
    assert same_tokens(theirs, ours, prompts()).shape == (3, 12)


def test_a_model_built_from_a_config_takes_its_token_ids(family):
    name, folder = family
    theirs, ours = load(name, folder)
    built = type(ours)(ours.config).generation_config
    assert isinstance(built, GenerationConfig)
    for field in ("eos_token_id", "pad_token_id", "bos_token_id"):
        assert getattr(built, field) == getattr(theirs.generation_config, field) == getattr(ours.config, field)
    assert built.max_length is None and built.do_sample is None   # unset: transformers' defaults at generate


@pytest.mark.parametrize("setting, neutral", [
    (dict(num_beams=4), 1), (dict(repetition_penalty=1.3), 1.0), (dict(bad_words_ids=[[5]]), None),
    (dict(no_repeat_ngram_size=2), 0), (dict(num_return_sequences=2, do_sample=True), 1), (dict(min_new_tokens=3), 0)])
def test_settings_minidl_cannot_compute_load_and_are_refused_when_they_apply(family, tmp_path, setting, neutral):
    name, folder = family
    theirs, ours = load(name, edited(folder, tmp_path, generation=setting))   # the folder loads, for its forward
    assert ours(md(prompts())).logits.shape == (3, 8, 99)
    field = next(iter(setting))
    with pytest.raises(ValueError, match=f"generate: {field}=.* is not supported"):
        ours.generate(md(prompts()), max_new_tokens=3)
    expected = same_tokens(theirs, ours, prompts(), max_new_tokens=3, do_sample=False, **{field: neutral})
    np.testing.assert_array_equal(ours.generate(md(prompts()), max_new_tokens=3, do_sample=False,
                                                **{field: None}).numpy(), expected)
    ours.generation_config = GenerationConfig(**{**vars(ours.generation_config), field: None, "do_sample": None})
    np.testing.assert_array_equal(ours.generate(md(prompts()), max_new_tokens=3).numpy(), expected)


def test_settings_that_would_not_apply_are_not_refused(family, tmp_path):
    name, folder = family
    # greedy: temperature, top_p and typical_p unused; one beam: length_penalty unused; min_length within the prompt
    settings = dict(temperature=0.3, top_p=0.5, typical_p=0.5, length_penalty=2.0, min_length=4, num_beams=1)
    theirs, ours = load(name, edited(folder, tmp_path, generation=settings))
    same_tokens(theirs, ours, prompts(), max_new_tokens=6)
    with pytest.raises(ValueError, match="typical_p=0.5 is not supported"):   # sampling would use it
        ours.generate(md(prompts()), max_new_tokens=6, do_sample=True)
    with pytest.raises(TypeError, match="unexpected argument.*num_beam "):
        ours.generate(md(prompts()), num_beam=1)


# ------------------------------------------------------------------------------- the inferred attention mask
def test_without_a_mask_the_pad_tokens_places_are_masked_as_transformers_infers(family):
    theirs, ours = load(*family)
    ids = prompts()
    ids[0, :3] = 0
    ids[2, :1] = 0
    expected = same_tokens(theirs, ours, ids, max_new_tokens=6)
    unmasked = ours.generate(md(ids), attention_mask=minidl.ones_like(md(ids)), max_new_tokens=6).numpy()
    assert (unmasked != expected).any()   # (the mask changes the tokens: the test has teeth)
    # a pad token that is an end-of-sequence id says nothing: no mask inferred, the pads attended to
    ids = ids.masked_fill(ids == 0, 2)
    expected = same_tokens(theirs, ours, ids, max_new_tokens=6, pad_token_id=2)
    masked = ours.generate(md(ids), attention_mask=md((ids != 2).long()), max_new_tokens=6, pad_token_id=2)
    assert (masked.numpy() != expected).any()


# ------------------------------------------------------------------------------- sampling
def chi_square(counts, probs):
    """Pearson's statistic of ``counts`` against ``probs`` and its degrees of freedom, cells expected under 5 draws
    pooled; inf when a token of probability 0 was drawn."""
    if counts[probs == 0].any():
        return math.inf, 1
    expected = counts.sum() * probs
    big = expected >= 5
    observed = np.append(counts[big], counts[~big & (probs > 0)].sum())
    expected = np.append(expected[big], expected[~big].sum())
    keep = expected > 0
    return float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()), int(keep.sum()) - 1


def chi_square_bound(df):
    """The 1 - 1e-6 quantile of chi-square with ``df`` degrees of freedom (Wilson and Hilferty's approximation)."""
    z = 4.7534
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def transformers_probs(scores, temperature, top_k, top_p, order=("temperature", "top_k", "top_p")):
    """softmax of ``scores`` (vocab,) warped by transformers' warpers in ``order`` (generate's by default)."""
    warpers = {"temperature": temperature != 1.0 and transformers.TemperatureLogitsWarper(temperature),
               "top_k": top_k and transformers.TopKLogitsWarper(top_k),
               "top_p": top_p < 1.0 and transformers.TopPLogitsWarper(top_p)}
    x = torch.as_tensor(scores, dtype=torch.float32)[None]
    for name in order:
        if warpers[name]:
            x = warpers[name](None, x)
    return x.softmax(-1)[0].double().numpy()


def assert_draws_follow(tokens, probs, wrong):
    """``tokens`` drawn from ``probs``: Pearson's test passes; and it rejects each of the ``wrong`` distributions
    that differs (total variation over 0.05), at least one."""
    counts = np.bincount(tokens, minlength=probs.size)
    stat, df = chi_square(counts, probs)
    assert stat < chi_square_bound(df), (stat, df, counts, np.round(probs * len(tokens)))
    differing = [w for w in wrong if 0.5 * np.abs(w - probs).sum() > 0.05]
    assert differing
    for w in differing:
        stat, df = chi_square(counts, w)
        assert stat > chi_square_bound(df)


@pytest.mark.parametrize("temperature, top_k, top_p", [
    (0.5, 0, 1.0), (1.6, 0, 1.0), (1.0, 4, 1.0), (1.0, 0, 0.75), (0.7, 6, 0.9), (2.0, 0, 0.6), (1.3, 3, 0.8)])
def test_the_sampler_draws_transformers_warped_distribution(temperature, top_k, top_p):
    scores = np.random.default_rng(0).normal(size=12) * 1.5
    probs = transformers_probs(scores, temperature, top_k, top_p)
    drawn = sample(minidl.tensor(scores, dtype=minidl.float32).expand(DRAWS, 12), temperature, top_k, top_p,
                   minidl.Generator().manual_seed(7)).numpy()
    wrong = [transformers_probs(scores, 1.0, 0, 1.0),
             transformers_probs(scores, temperature, top_k, top_p, order=("top_p", "top_k", "temperature"))]
    assert_draws_follow(drawn, probs, wrong)


def test_a_sampling_folder_draws_transformers_distribution(family, tmp_path):
    name, folder = family
    settings = dict(do_sample=True, temperature=0.7, top_k=6, top_p=0.9)
    theirs, ours = load(name, edited(folder, tmp_path, generation=settings), dtype="float32")
    ids = prompts(rows=1, tokens=6)
    with torch.no_grad():
        scores = theirs(ids).logits[0, -1].numpy()
    drawn = ours.generate(md(ids.expand(DRAWS, 6)), max_new_tokens=1, generator=minidl.Generator().manual_seed(3))
    assert_draws_follow(drawn[:, -1].numpy(), transformers_probs(scores, 0.7, 6, 0.9),
                        wrong=[transformers_probs(scores, 1.0, 0, 1.0), transformers_probs(scores, 0.7, 0, 1.0)])
    same_tokens(theirs, ours, prompts(), max_new_tokens=5, do_sample=False)   # an argument overrides the folder


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 0, 1.0), (1.0, 5, 1.0), (1.0, 0, 0.8), (1.3, 7, 0.6)])
def test_warping_matches_transformers_warpers(temperature, top_k, top_p):
    torch.manual_seed(4)
    scores = torch.randn(4, 99) * 3
    expected = scores.clone()
    if temperature != 1.0:
        expected = transformers.TemperatureLogitsWarper(temperature)(None, expected)
    if top_k:
        expected = transformers.TopKLogitsWarper(top_k)(None, expected)
    if top_p < 1.0:
        expected = transformers.TopPLogitsWarper(top_p)(None, expected)
    got = warp(md(scores), temperature, top_k, top_p).numpy()
    kept = torch.isfinite(expected).numpy()
    np.testing.assert_array_equal(np.isfinite(got), kept)
    np.testing.assert_allclose(got[kept], expected.numpy()[kept], rtol=1e-6)
    assert kept.sum(-1).min() >= 1


@pytest.mark.parametrize("top_k", [-1, 2.5])
def test_a_top_k_transformers_refuses_is_refused(top_k):
    with pytest.raises(ValueError, match="`top_k` has to be a strictly positive integer"):
        transformers.TopKLogitsWarper(top_k)
    with pytest.raises(ValueError, match="top_k has to be a strictly positive integer"):
        warp(minidl.zeros(1, 5), 1.0, top_k, 1.0)


# ------------------------------------------------------------------------------- DynamicCache
def assert_same_cache(ours, theirs):
    assert len(ours) == len(theirs)
    for index, (mine, other) in enumerate(zip(ours.layers, theirs.layers)):
        assert ours.get_seq_length(index) == theirs.get_seq_length(index)
        if other.keys is None or not other.is_initialized:
            assert mine.keys is None
            continue
        np.testing.assert_array_equal(mine.keys.numpy(), other.keys.numpy())
        np.testing.assert_array_equal(mine.values.numpy(), other.values.numpy())
    assert ours.get_seq_length(len(theirs) + 3) == theirs.get_seq_length(len(theirs) + 3) == 0


def test_dynamic_cache_methods_as_transformers_on_the_same_tensors():
    gen = torch.Generator().manual_seed(0)
    ours, theirs = DynamicCache(), transformers.DynamicCache()
    for step, tokens in enumerate((5, 1, 2)):
        for layer in (0, 1, 2):
            key, value = (torch.randn(4, 2, tokens, 3, generator=gen) for _ in range(2))
            returned = ours.update(md(key), md(value), layer)
            expected = theirs.update(key, value, layer)
            np.testing.assert_array_equal(returned[0].numpy(), expected[0].numpy())
    assert_same_cache(ours, theirs)
    for cache in (ours, theirs):
        cache.crop(-2)
        cache.crop(0)
    assert_same_cache(ours, theirs)
    assert ours.get_seq_length() == 6
    with pytest.raises(ValueError, match="positive value"):
        theirs.crop(3)
    with pytest.raises(ValueError, match="tokens_to_remove must be 0 or negative.*got 3"):
        ours.crop(3)
    ours.batch_select_indices([3, 0, 1])
    theirs.batch_select_indices([3, 0, 1])
    assert_same_cache(ours, theirs)
    ours.batch_select_indices(minidl.tensor([True, False, True]))
    theirs.batch_select_indices(torch.tensor([True, False, True]))
    assert_same_cache(ours, theirs)
    ours.reorder_cache(minidl.tensor([1, 0]))
    theirs.reorder_cache(torch.tensor([1, 0]))
    assert_same_cache(ours, theirs)
    copy, their_copy = DynamicCache(iter(ours)), transformers.DynamicCache(list(theirs))   # (ddp_cache_data)
    assert_same_cache(copy, their_copy)
    ours.reset()
    theirs.reset()
    assert_same_cache(ours, theirs)
    assert len(ours) == 3 and ours.get_seq_length() == 0 and copy.get_seq_length() == 6


def test_dynamic_cache_layers_made_on_demand_or_from_a_config(family):
    theirs_model, ours_model = load(*family)
    ours, theirs = DynamicCache(config=ours_model.config), transformers.DynamicCache(config=theirs_model.config)
    assert_same_cache(ours, theirs)
    assert len(ours) == 2
    ids = prompts()
    with torch.no_grad():
        theirs_model(ids, past_key_values=theirs)
    ours_model(md(ids), cache=ours)
    assert ours.get_seq_length() == theirs.get_seq_length() == 8
    late, their_late = DynamicCache(), transformers.DynamicCache()   # a later layer first: those before made empty
    key = torch.randn(1, 1, 2, 4)
    late.update(md(key), md(key), 2)
    their_late.update(key, key, 2)
    assert_same_cache(late, their_late)
    with pytest.raises(ValueError, match="offloading=True is not supported"):
        DynamicCache(offloading=True)
    with pytest.raises(ValueError, match="no num_hidden_layers"):
        DynamicCache(config=GenerationConfig())
