"""POST /v1/generate over real HTTP: streamed and whole answers equal generate's greedy tokens (a tiny GPT-2 folder in
float64, so that no near-tie flips a choice), concurrent streams each get their own, a client leaving mid-stream frees
its place, bad requests are 4xx naming the problem and leave the server answering, and a factory's char-level
tokenizer serves text."""
import asyncio
import json
import sys
import time
from pathlib import Path

import httpx
import pytest

import minidl
from minidl.serve import Server
from minidl.serve.spec import load_runner

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from char_gpt import GPT  # noqa: E402

TIMEOUT = httpx.Timeout(30.0)
EOS = 2
PROMPTS = [[5], [6, 7, 8, 9], [10, 11, 12, 13, 14, 15, 16, 17, 18], [19, 20], [21, 22, 23, 24, 25, 26], [27, 28, 29],
           [30, 31, 32, 33, 34, 35, 36], [37, 38]]


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    """A tiny GPT-2 folder (transformers' random weights, float64) loaded as the command loads it."""
    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=40, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                                     initializer_range=0.5, bos_token_id=1, eos_token_id=EOS)
    transformers.GPT2LMHeadModel(config).double().save_pretrained(folder)
    return load_runner(str(folder))


@pytest.fixture(scope="module")
def server(runner):
    with Server(runner, max_sequences=4, max_tokens=30) as running:
        yield running


def expected(model, prompt, new):
    """generate's greedy new tokens for ``prompt`` alone, up to its first end-of-sequence token (then it pads)."""
    tokens = model.generate(minidl.tensor([prompt]), max_new_tokens=new, do_sample=False)[0, len(prompt):].tolist()
    return tokens[:tokens.index(EOS) + 1] if EOS in tokens else tokens


async def stream(client, url, body):
    """The events of a streamed generate request, parsed (the last one is the string ``[DONE]``)."""
    events = []
    async with client.stream("POST", f"{url}/v1/generate", json=body) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


def streamed(url, body):
    async def go():
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            return await stream(client, url, body)
    return asyncio.run(asyncio.wait_for(go(), 60))


def metric(url, name):
    text = httpx.get(f"{url}/metrics", timeout=TIMEOUT).text
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def test_streamed_tokens_are_generates_greedy_ones(server, runner):
    prompt = PROMPTS[2]
    events = streamed(server.url, {"input_ids": prompt, "max_tokens": 12})
    tokens, end, done = [e["token"] for e in events[:-2]], events[-2], events[-1]
    want = expected(runner.module, prompt, 12)
    assert tokens == want and done == "[DONE]"
    assert all(e["text"] is None for e in events[:-2])          # (no tokenizer: ids only)
    assert end["finish_reason"] == ("stop" if EOS in want else "length")
    assert end["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": len(want),
                            "total_tokens": len(prompt) + len(want)}


def test_whole_answer_without_streaming(server, runner):
    response = httpx.post(f"{server.url}/v1/generate", json={"input_ids": PROMPTS[1], "max_tokens": 9,
                                                             "stream": False}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["tokens"] == expected(runner.module, PROMPTS[1], 9) and body["text"] is None
    assert body["usage"]["completion_tokens"] == len(body["tokens"])


def test_concurrent_streams_each_get_their_own_tokens(server, runner):
    lengths = [3, 14, 7, 20, 1, 11, 5, 16]
    before = metric(server.url, "minidl_generated_tokens_total")

    async def all_at_once():
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            return await asyncio.gather(*(stream(client, server.url, {"input_ids": p, "max_tokens": n})
                                          for p, n in zip(PROMPTS, lengths)))

    answers = asyncio.run(asyncio.wait_for(all_at_once(), 90))
    for prompt, n, events in zip(PROMPTS, lengths, answers):
        assert [e["token"] for e in events[:-2]] == expected(runner.module, prompt, n), prompt
    assert metric(server.url, "minidl_generated_tokens_total") - before == sum(len(e) - 2 for e in answers)


class SlowGPT(GPT):
    """The char-GPT taking 20 ms a step, so that a long request is still running when its client leaves."""

    def forward(self, idx):
        time.sleep(0.02)
        return super().forward(idx)


def test_a_client_leaving_mid_stream_frees_its_place():
    minidl.manual_seed(0)
    model = SlowGPT(vocab=30, context=8, width=16, heads=2, layers=1, dropout=0.0)

    async def leave_early(url, batcher):
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            async with client.stream("POST", f"{url}/v1/generate", json={"input_ids": [3, 4], "max_tokens": 500}) \
                    as response:
                events = 0
                async for line in response.aiter_lines():
                    events += line.startswith("data: ")
                    if events == 3:        # (the first comes from the prefill, before the request joins the batch)
                        return batcher.active   # (then the connection closes)

    with Server(model) as running:
        batcher = running.app.state.generation.batcher
        assert asyncio.run(asyncio.wait_for(leave_early(running.url, batcher), 30)) == 1
        deadline = time.monotonic() + 5                     # (500 steps would take 10 s)
        while metric(running.url, "minidl_running_sequences") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert batcher.active == 0 and metric(running.url, "minidl_running_sequences") == 0
        assert metric(running.url, "minidl_generated_tokens_total") < 100


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 400, "not valid JSON"),
    ([1, 2], 422, "must be a JSON object"),
    ({"max_tokens": 3}, 422, 'exactly one of "input_ids"'),
    ({"input_ids": [1], "prompt": "a"}, 422, 'exactly one of "input_ids"'),
    ({"prompt": "hello"}, 400, "needs a tokenizer"),
    ({"input_ids": [1], "stop": "x"}, 400, "needs a tokenizer"),
    ({"input_ids": []}, 422, "no tokens"),
    ({"input_ids": [1, 2.5]}, 422, "integer token ids"),
    ({"input_ids": [1, True]}, 422, "integer token ids"),
    ({"input_ids": [1, 40]}, 422, "outside the vocabulary [0, 40)"),
    ({"input_ids": [-1]}, 422, "outside the vocabulary"),
    ({"input_ids": [1], "stop": [99]}, 422, "outside the vocabulary"),
    ({"input_ids": [1], "max_tokens": 0}, 422, '"max_tokens" must be an integer >= 1'),
    ({"input_ids": [1] * 20, "max_tokens": 11}, 422, "over this server's limit of 30 tokens"),
    ({"input_ids": [1], "temperature": -1}, 422, "temperature must be >= 0"),
    ({"input_ids": [1], "temperature": "hot"}, 422, '"temperature" must be a finite number'),
    ({"input_ids": [1], "temperature": 1, "top_p": 0}, 422, "top_p must be in (0, 1]"),
    ({"input_ids": [1], "top_k": -2}, 422, '"top_k" must be an integer >= 0'),
    ({"input_ids": [1], "stream": "yes"}, 422, "stream must be true or false"),
    ({"input_ids": [1], "max_token": 3}, 422, "unknown field(s) 'max_token'"),
])
def test_bad_requests_are_refused_and_the_server_still_answers(server, runner, body, status, words):
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = httpx.post(f"{server.url}/v1/generate", timeout=TIMEOUT, **kwargs)
    assert response.status_code == status and words in response.json()["error"], response.text
    good = httpx.post(f"{server.url}/v1/generate", json={"input_ids": [9, 8], "max_tokens": 4, "stream": False},
                      timeout=TIMEOUT)
    assert good.status_code == 200 and good.json()["tokens"] == expected(runner.module, [9, 8], 4)


def test_the_models_positions_bound_a_request(runner):
    with Server(runner) as running:          # (no server limit: GPT-2's 32 positions fit prompt + new - 1)
        response = httpx.post(f"{running.url}/v1/generate", json={"input_ids": [1] * 20, "max_tokens": 14},
                              timeout=TIMEOUT)
        assert response.status_code == 422 and "n_positions=32" in response.json()["error"]
        fits = httpx.post(f"{running.url}/v1/generate", json={"input_ids": [1] * 20, "max_tokens": 13,
                                                              "stream": False}, timeout=TIMEOUT)
        assert fits.status_code == 200, fits.text


def test_models_lists_the_generator_and_predict_still_answers(server, runner):
    described = httpx.get(f"{server.url}/v1/models", timeout=TIMEOUT).json()["models"][0]["generation"]
    assert described == {"vocab_size": 40, "tokenizer": False, "max_sequences": 4, "max_tokens": 30,
                         "max_positions": 32, "eos_token_ids": [EOS]}
    logits = httpx.post(f"{server.url}/v1/predict", json={"inputs": [1, 2, 3]}, timeout=TIMEOUT)
    assert logits.status_code == 200 and len(logits.json()["outputs"]) == 3


FACTORY = '''
import sys
import time
sys.path.insert(0, {examples!r})
import minidl
from char_gpt import GPT

ALPHABET = " abcdefghijklmnopqrstuvwxyz.,"


class CharTokenizer:
    def encode(self, text):
        return [ALPHABET.index(c) for c in text]

    def decode(self, ids):
        return "".join(ALPHABET[i] for i in ids)


tokenizer = CharTokenizer()      # the server takes a factory's tokenizer from the same file


def build():
    minidl.manual_seed(0)
    return GPT(vocab=len(ALPHABET), context=8, width=16, heads=2, layers=2, dropout=0.0).double()
'''


def test_a_factorys_char_model_serves_text(tmp_path):
    (tmp_path / "factory.py").write_text(FACTORY.format(examples=str(Path(__file__).resolve().parents[1] / "examples")))
    runner = load_runner(f"{tmp_path / 'factory.py'}:build")
    tokenizer = runner.tokenizer
    assert type(tokenizer).__name__ == "CharTokenizer"
    prompt = "hello world"
    with Server(runner) as running:
        whole = httpx.post(f"{running.url}/v1/generate", json={"prompt": prompt, "max_tokens": 12, "stream": False},
                           timeout=TIMEOUT).json()
        events = streamed(running.url, {"prompt": prompt, "max_tokens": 12})
        stopped = httpx.post(f"{running.url}/v1/generate", timeout=TIMEOUT,
                             json={"prompt": prompt, "max_tokens": 12, "stream": False, "stop": whole["text"][3:5]})
        unknown = httpx.post(f"{running.url}/v1/generate", json={"prompt": "Hi"}, timeout=TIMEOUT)
    ids = minidl.tensor([tokenizer.encode(prompt)])
    with minidl.inference_mode():                    # greedy by hand, over the model's last 8 characters
        for _ in range(12):
            ids = minidl.cat([ids, runner.module(ids[:, -8:])[:, -1].argmax(-1)[:, None]], dim=1)
    want = tokenizer.decode(ids[0, -12:].tolist())
    assert whole["text"] == want and whole["finish_reason"] == "length"
    assert "".join(e["text"] for e in events[:-2]) == want
    assert stopped.json()["text"] == want[:want.index(want[3:5])] and stopped.json()["finish_reason"] == "stop"
    assert unknown.status_code == 422 and "the tokenizer cannot encode 'Hi'" in unknown.json()["error"]
