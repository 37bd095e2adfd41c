"""minidl.serve.continuous: requests joining and leaving a running batch each get the tokens generate gives their
prompt alone (tiny GPT-2 and LLaMA in float64, so that no near-tie flips a greedy choice), whatever runs beside them;
stop tokens and sequences, cancelling, queueing beyond max_batch_size, seeded sampling, the recomputing fallback for
a model without a cache (the examples' char-GPT), the worker thread with asyncio streaming, and failures."""
import asyncio
import sys
from pathlib import Path

import pytest

import minidl
from minidl import nn
from minidl.models import GPT2LMHeadModel, LlamaForCausalLM
from minidl.serve.continuous import ContinuousBatcher

transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from char_gpt import GPT  # noqa: E402

COMMON = dict(vocab_size=40, initializer_range=0.5, bos_token_id=1, eos_token_id=2, pad_token_id=0)
CONFIGS = {
    "gpt2": (GPT2LMHeadModel, transformers.GPT2Config(n_positions=48, n_embd=32, n_layer=2, n_head=4, **COMMON)),
    # (a small rotary theta, so that a position off by the padding changes greedy choices)
    "llama": (LlamaForCausalLM, transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                         num_attention_heads=4, num_key_value_heads=2,
                                                         max_position_embeddings=64, **COMMON,
                                                         rope_parameters={"rope_type": "default", "rope_theta": 10.0})),
}
PROMPTS = [[5], [6, 7, 8, 9], [10, 11, 12, 13, 14, 15, 16, 17, 18], [19, 20], [21, 22, 23, 24, 25, 26], [27, 28, 29]]
SAMPLING = dict(temperature=0.9, top_k=20, top_p=0.95)


@pytest.fixture(scope="module", params=list(CONFIGS))
def model(request):
    """A tiny causal LM built by minidl from a transformers config, random weights, float64, eval mode."""
    cls, config = CONFIGS[request.param]
    minidl.manual_seed(0)
    return cls(cls.config_from_dict(config.to_diff_dict())).double().eval()


@pytest.fixture(scope="module")
def gpt2():
    cls, config = CONFIGS["gpt2"]
    minidl.manual_seed(0)
    return cls(cls.config_from_dict(config.to_diff_dict())).double().eval()


def expected(model, prompt, new, **settings):
    """generate's new tokens for ``prompt`` alone, up to its first end-of-sequence token (generate pads after it)."""
    tokens = model.generate(minidl.tensor([prompt]), max_new_tokens=new, **settings)[0, len(prompt):].tolist()
    eos = model.generation_config.eos_token_id
    return tokens[:tokens.index(eos) + 1] if eos in tokens else tokens


def run(batcher, plan=(), cancel=None):
    """Step ``batcher`` by hand until idle, submitting ``plan``'s (step, prompt, settings) before their step and
    cancelling ``cancel`` (a plan index) once it has 3 tokens; checks the batch bounds each step. Returns the
    handles in plan order, the most requests seen queued, and the cancelled handle's tokens when cancelled."""
    handles, most_queued, at_cancel, step = {}, 0, None, 0
    while True:
        for i, (when, prompt, settings) in enumerate(plan):
            if when == step:
                handles[i] = batcher.submit(prompt, **settings)
        if cancel in handles and at_cancel is None and len(handles[cancel].tokens) >= 3:
            handles[cancel].cancel()
            at_cancel = list(handles[cancel].tokens)
        worked = batcher.step()
        assert batcher.active <= batcher.max_batch_size
        most_queued = max(most_queued, batcher.queued)
        mask = getattr(batcher.batch, "mask", None)
        if mask is not None:   # the left padding is never wider than the shortest row needs
            assert int(mask.sum(-1).max()) == mask.shape[1]
        step += 1
        if not worked and step > max((when for when, _, _ in plan), default=0):
            return [handles[i] for i in range(len(plan))], most_queued, at_cancel


def churn(model, batcher):
    """Six greedy requests of different lengths, submitted at different steps into a batch of 3: one ending on a stop
    token of its own output, one after 3 tokens, one cancelled midway; checks each against generate alone."""
    full = [expected(model, prompt, 10) for prompt in PROMPTS]
    assert len(full[0]) >= 3 and len(full[1]) >= 6, "the fixture's outputs are too short to test stopping"
    stop = full[0][2]
    settings = [dict(max_tokens=10, stop_token_ids=[stop, 2]), dict(max_tokens=10), dict(max_tokens=10),
                dict(max_tokens=10), dict(max_tokens=3), dict(max_tokens=10)]
    plan = [(when, prompt, s) for when, prompt, s in zip([0, 0, 0, 0, 2, 5], PROMPTS, settings)]
    handles, most_queued, at_cancel = run(batcher, plan, cancel=1)
    assert most_queued >= 1 and batcher.active == batcher.queued == 0
    assert handles[0].tokens == full[0][:full[0].index(stop) + 1] and handles[0].finish_reason == "stop"
    assert handles[1].tokens == at_cancel == full[1][:len(at_cancel)] and handles[1].finish_reason == "cancelled"
    assert handles[4].tokens == full[4][:3] and handles[4].finish_reason == "length"
    for i in (2, 3, 5):
        assert handles[i].tokens == full[i]
        assert handles[i].finish_reason == ("stop" if full[i][-1] == 2 else "length")
    for handle in handles:
        assert list(handle) == handle.tokens   # the stream holds the same tokens, then ends


def test_greedy_requests_joining_and_leaving_get_generates_tokens(model):
    batcher = ContinuousBatcher(model, max_batch_size=3)
    assert type(batcher.batch).__name__ == "CachedBatch"
    churn(model, batcher)


def test_recomputing_each_step_gives_the_same_tokens(gpt2):
    churn(gpt2, ContinuousBatcher(gpt2, max_batch_size=3, use_cache=False))


def test_a_model_without_a_cache_recomputes_its_last_window_of_tokens(gpt2):
    minidl.manual_seed(0)
    model = GPT(vocab=30, context=8, width=16, heads=2, layers=2, dropout=0.0).double().eval()
    with minidl.no_grad():
        for p in model.parameters():
            nn.init.normal_(p, 0.0, 0.5)

    def alone(prompt, new):
        ids = minidl.tensor([prompt])
        with minidl.no_grad():
            for _ in range(new):
                ids = minidl.cat([ids, model(ids[:, -8:])[:, -1].argmax(-1)[:, None]], dim=1)
        return ids[0, len(prompt):].tolist()

    batcher = ContinuousBatcher(model, max_batch_size=2, window=8)
    plan = [(when, prompt, dict(max_tokens=12)) for when, prompt in zip([0, 0, 1, 4], PROMPTS)]
    handles, most_queued, _ = run(batcher, plan)
    assert most_queued >= 1
    for (_, prompt, _), handle in zip(plan, handles):
        assert handle.tokens == alone(prompt, 12) and handle.finish_reason == "length"
    with pytest.raises(ValueError, match="window applies to recomputed decoding"):
        ContinuousBatcher(gpt2, window=8)


def test_stop_sequences_end_a_request_and_are_not_delivered(gpt2):
    full = expected(gpt2, PROMPTS[1], 10, eos_token_id=[])
    stop = full[3:5]
    first = next(i for i in range(len(full)) if full[i:i + 2] == stop)
    batcher = ContinuousBatcher(gpt2)
    ended = batcher.submit(PROMPTS[1], max_tokens=10, stop_token_ids=(), stop_sequences=[stop, [99, 98]])
    unmatched = batcher.submit(PROMPTS[1], max_tokens=10, stop_token_ids=(), stop_sequences=[[full[-1], 99]])
    generated = 0
    while batcher.step():
        generated += 1 + (generated == 0)   # (the first step prefills, then decodes)
        if not ended.done:   # a token that could begin a stop sequence waits for the next one
            assert ended.tokens == full[:generated - (full[generated - 1] == stop[0])]
    assert ended.tokens == full[:first] and ended.finish_reason == "stop"
    assert unmatched.tokens == full and unmatched.finish_reason == "length"   # held back, then released at the end


def test_seeded_sampling_is_reproducible_per_request_whatever_runs_beside_it(model):
    new = 10
    generator = minidl.Generator()
    generator.manual_seed(7)
    reference = expected(model, PROMPTS[2], new, do_sample=True, generator=generator, **SAMPLING)
    alone, _, _ = run(ContinuousBatcher(model), [(0, PROMPTS[2], dict(max_tokens=new, seed=7, **SAMPLING))])
    crowd = [(0, PROMPTS[0], dict(max_tokens=4)), (0, PROMPTS[2], dict(max_tokens=new, seed=8, **SAMPLING)),
             (2, PROMPTS[2], dict(max_tokens=new, seed=7, **SAMPLING)), (3, PROMPTS[3], dict(max_tokens=new))]
    crowded, _, _ = run(ContinuousBatcher(model, max_batch_size=3), crowd)
    assert alone[0].tokens == crowded[2].tokens == reference
    assert crowded[1].tokens != crowded[2].tokens   # the same prompt, another seed


def test_a_worker_thread_streams_to_asyncio_while_requests_come_and_go(gpt2):
    new = 8
    full = [expected(gpt2, prompt, new) for prompt in PROMPTS]

    async def consume(handle, cancel_after=None):
        got = []
        async for token in handle:
            got.append(token)
            if len(got) == cancel_after:
                handle.cancel()
                break
        return got

    async def main(batcher):
        handles = [batcher.submit(prompt, max_tokens=new) for prompt in PROMPTS]
        streams = [consume(h, cancel_after=2 if i == 1 else None) for i, h in enumerate(handles)]
        got = await asyncio.wait_for(asyncio.gather(*streams), timeout=60)
        rest = await asyncio.wait_for(consume(handles[1]), timeout=60)   # what came before the cancel took effect
        return handles, got, rest

    with ContinuousBatcher(gpt2, max_batch_size=2).start() as batcher:
        handles, got, rest = asyncio.run(main(batcher))
        assert got[1] + rest == handles[1].tokens == full[1][:len(handles[1].tokens)]
        assert handles[1].finish_reason == "cancelled"
        for i in (0, 2, 3, 4, 5):
            assert got[i] == handles[i].tokens == full[i]
        assert list(batcher.submit(PROMPTS[0], max_tokens=new)) == full[0]   # plain iteration, from this thread
        with pytest.raises(RuntimeError, match="worker thread runs the steps"):
            batcher.step()
        waiting = batcher.submit(PROMPTS[0], max_tokens=new)
    assert waiting.finish_reason in ("cancelled", "length", "stop")   # close() ends whatever has not finished
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(PROMPTS[0])


def test_close_cancels_queued_requests(gpt2):
    batcher = ContinuousBatcher(gpt2)
    handle = batcher.submit(PROMPTS[0])
    batcher.close()
    assert list(handle) == [] and handle.finish_reason == "cancelled"


def test_a_failing_step_ends_the_batch_with_the_error_and_the_batcher_goes_on(gpt2, monkeypatch):
    batcher = ContinuousBatcher(gpt2)
    handles = [batcher.submit(prompt, max_tokens=10, stop_token_ids=()) for prompt in PROMPTS[:2]]
    batcher.step()

    def fail(*args, **kwargs):
        raise RuntimeError("out of memory")

    with monkeypatch.context() as patch:
        patch.setattr(gpt2, "forward", fail)
        with pytest.raises(RuntimeError, match="out of memory"):
            batcher.step()
    for handle in handles:
        assert handle.finish_reason == "error" and len(handle.tokens) == 2
        with pytest.raises(RuntimeError, match="out of memory"):
            list(handle)
    bad = batcher.submit([5, 999])   # beyond the vocabulary: its prefill fails, alone
    good = batcher.submit(PROMPTS[0], max_tokens=5)
    run(batcher)
    assert bad.finish_reason == "error" and bad.tokens == []
    assert good.tokens == expected(gpt2, PROMPTS[0], 5)


def test_a_model_raising_a_base_exception_ends_every_request_and_the_worker(gpt2, monkeypatch):
    """SystemExit or KeyboardInterrupt from the model (not an Exception): the running and queued requests end with
    it instead of waiting for ever, and the batcher closes (a server answers new requests 503)."""
    batcher = ContinuousBatcher(gpt2, max_batch_size=1)
    running = batcher.submit(PROMPTS[0], max_tokens=10, stop_token_ids=())
    batcher.step()
    queued = batcher.submit(PROMPTS[1], max_tokens=10, stop_token_ids=())

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt("stop")

    with monkeypatch.context() as patch:
        patch.setattr(gpt2, "forward", interrupt)
        batcher.start()
        batcher._thread.join(30)
    assert not batcher._thread.is_alive()
    assert running.finish_reason == "error" and queued.finish_reason == "error"
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(PROMPTS[2])


@pytest.mark.parametrize("prompt, settings, error", [
    ([], {}, "non-empty"),
    ([1.5], {}, "non-empty"),
    ([5], dict(max_tokens=0), "max_tokens must be at least 1"),
    ([5], dict(temperature=-1.0), "temperature must be >= 0"),
    ([5], dict(temperature=1.0, top_p=1.5), "top_p"),
    ([5], dict(temperature=1.0, top_k=-2), "top_k"),
    ([5], dict(seed=1, generator=minidl.Generator()), "seed or generator"),
    ([5], dict(stop_sequences=[[]]), "empty sequence"),
    ([5] * 40, dict(max_tokens=20), "n_positions"),
])
def test_bad_requests_are_refused_when_submitted(gpt2, prompt, settings, error):
    batcher = ContinuousBatcher(gpt2)
    with pytest.raises(ValueError, match=error):
        batcher.submit(prompt, **settings)
    assert batcher.queued == 0
