"""minidl.serve over real HTTP: answers equal the model's own, concurrent requests are batched, every kind of bad
input is a 4xx naming the problem and leaves the server answering, and the command drains a request on SIGTERM."""
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import httpx
import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.serve import Runner, Server
from minidl.serve.inputs import InputError, to_array
from minidl.serve.spec import load_runner

from serve_processes import free_port, wait_until_serving

TIMEOUT = httpx.Timeout(20.0)
GOOD = [0.5, -1.0, 2.0, 0.25]


def small_model():
    minidl.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).eval()


def expected(model, examples):
    with minidl.inference_mode():
        return model(minidl.from_numpy(np.asarray(examples, dtype=np.float32))).numpy()


@pytest.fixture(scope="module")
def model():
    return small_model()


@pytest.fixture(scope="module")
def server(model):
    with Server(model, max_wait_ms=5, max_body_mb=0.01) as running:
        yield running


def post(server, body, **kwargs):
    return httpx.post(f"{server.url}/v1/predict", timeout=TIMEOUT, **kwargs,
                      **({"content": body} if isinstance(body, (bytes, str)) else {"json": body}))


def assert_good(server, model):
    response = post(server, {"inputs": GOOD})
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(response.json()["outputs"], expected(model, [GOOD])[0], rtol=0, atol=1e-6)


def test_one_example_gives_one_output(server, model):
    assert_good(server, model)


def test_a_list_gives_a_list(server, model):
    examples = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    response = post(server, {"inputs": examples.tolist()})
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(response.json()["outputs"], expected(model, examples), rtol=0, atol=1e-6)


def test_concurrent_requests_are_batched_and_answered_alike(model):
    examples = np.random.default_rng(1).standard_normal((32, 4)).astype(np.float32)

    async def ask_all(url):
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            answers = await asyncio.gather(*(client.post(f"{url}/v1/predict", json={"inputs": x.tolist()})
                                             for x in examples))
            return answers, (await client.get(f"{url}/metrics")).text

    with Server(model, max_batch_size=8, max_wait_ms=300) as running:
        answers, metrics = asyncio.run(asyncio.wait_for(ask_all(running.url), 30))
    assert [a.status_code for a in answers] == [200] * 32
    np.testing.assert_allclose([a.json()["outputs"] for a in answers], expected(model, examples), rtol=0, atol=1e-6)
    samples = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if not line.startswith("#"))
    calls, single = float(samples["minidl_batch_size_count"]), float(samples['minidl_batch_size_bucket{le="1"}'])
    assert float(samples["minidl_batch_size_sum"]) == 32 and calls < 32 and single < calls
    assert samples['minidl_requests_total{route="/v1/predict",status="200"}'] == "32"
    assert samples["minidl_queue_length"] == "0"
    assert samples['minidl_request_duration_seconds_count{route="/v1/predict"}'] == "32"


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 400, "not valid JSON"),
    (b"[1, 2]", 422, "JSON object"),
    ({"input": GOOD}, 422, 'no "inputs"'),
    ({"inputs": [[1, 2, 3, 4], [1, 2]]}, 422, "ragged"),
    ({"inputs": [1, 2, 3]}, 422, "linear"),                    # the model's own error
    ({"inputs": [[1, 2, 3], [4, 5, 6]]}, 422, "linear"),
    ({"inputs": [1, "a", 3, 4]}, 422, "inputs[1]"),
    ({"inputs": [1, None, 3, 4]}, 422, "not a number"),
    ({"inputs": [1, True, 3, 4]}, 422, "not a number"),
    ({"inputs": {"x": 1}}, 422, "not a number"),
    ({"inputs": []}, 422, "no numbers"),
    ({"inputs": [10 ** 400]}, 422, "fit"),
    (json.dumps({"inputs": [GOOD] * 1000}).encode(), 413, "over the limit"),
])
def test_bad_input_is_refused_and_the_server_still_answers(server, model, body, status, words):
    response = post(server, body)
    assert response.status_code == status, response.text[:300]
    assert words in response.json()["error"]
    assert_good(server, model)


def test_an_oversize_stream_is_refused_while_it_is_read(server, model):
    def chunks():                    # no Content-Length: the limit is met while the body arrives
        yield b'{"inputs": ['
        for _ in range(2000):
            yield b"1.0, " * 10
    response = httpx.post(f"{server.url}/v1/predict", content=chunks(), timeout=TIMEOUT)
    assert response.status_code == 413 and "over the limit" in response.json()["error"]
    assert_good(server, model)


def test_shapes_sent_together_run_apart(model):
    async def ask(url):
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            return await asyncio.gather(client.post(f"{url}/v1/predict", json={"inputs": [1, 2, 3]}),
                                        client.post(f"{url}/v1/predict", json={"inputs": GOOD}))
    with Server(model, max_wait_ms=200) as running:
        bad, good = asyncio.run(asyncio.wait_for(ask(running.url), 30))
    assert bad.status_code == 422 and "linear" in bad.json()["error"]
    assert good.status_code == 200


def test_health_and_models(server):
    assert httpx.get(f"{server.url}/health", timeout=TIMEOUT).json() == {"status": "ok"}
    (described,) = httpx.get(f"{server.url}/v1/models", timeout=TIMEOUT).json()["models"]
    assert described["name"] == "Sequential" and described["max_batch_size"] == 32


FACTORY = textwrap.dedent("""
    import os
    import time
    from minidl import nn

    class Slow(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))

        def forward(self, x):
            open(os.environ["MINIDL_TEST_MARKER"], "w").close()    # (the test sends SIGTERM once this exists)
            time.sleep(1.5)
            return self.net(x)

    def slow():
        return Slow()
""")


def test_the_command_serves_a_factory_and_drains_on_sigterm(tmp_path, model):
    (tmp_path / "factory.py").write_text(FACTORY)
    minidl.save({f"net.{k}": v for k, v in model.state_dict().items()}, tmp_path / "weights.safetensors")
    port = free_port()
    marker = tmp_path / "in-the-model"
    proc = subprocess.Popen([sys.executable, "-m", "minidl.serve", f"{tmp_path / 'factory.py'}:slow", "--weights",
                             str(tmp_path / "weights.safetensors"), "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "MINIDL_TEST_MARKER": str(marker)})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(proc, url)
        answer = {}
        thread = threading.Thread(target=lambda: answer.update(r=httpx.post(f"{url}/v1/predict", timeout=TIMEOUT,
                                                                            json={"inputs": GOOD})))
        thread.start()
        deadline = time.monotonic() + 60
        while not marker.exists():                # the request is in the model (which then sleeps 1.5 s)
            assert time.monotonic() < deadline, "the request never reached the model"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        thread.join(20)
        assert answer["r"].status_code == 200, answer["r"].text
        np.testing.assert_allclose(answer["r"].json()["outputs"], expected(model, [GOOD])[0], rtol=0, atol=1e-6)
        # uvicorn re-raises the SIGTERM it caught once it has drained, so the exit is by that signal
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
        assert b"Traceback" not in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


class Doubler(Runner):
    """A runner of matrices: tells one 2-d example from a list of them."""
    name, example_ndim = "doubler", 2

    def __call__(self, batch):
        return batch * 2 if batch.sum() >= 0 else batch[:0]     # a negative sum: a wrong number of rows


def test_a_runner_with_a_known_example_rank():
    with Server(Doubler()) as running:
        url = f"{running.url}/v1/predict"
        one = httpx.post(url, json={"inputs": [[1, 2], [3, 4]]}, timeout=TIMEOUT)
        assert one.json() == {"outputs": [[2, 4], [6, 8]]}
        two = httpx.post(url, json={"inputs": [[[1, 2]], [[3, 4]]]}, timeout=TIMEOUT)
        assert two.json() == {"outputs": [[[2, 4]], [[6, 8]]]}
        flat = httpx.post(url, json={"inputs": [1, 2]}, timeout=TIMEOUT)
        assert flat.status_code == 422 and "2 dimension(s)" in flat.json()["error"]
        rows = httpx.post(url, json={"inputs": [[[-99, 2]], [[3, 4]]]}, timeout=TIMEOUT)
        assert rows.status_code == 422 and "returned 0 rows for 2 examples" in rows.json()["error"]


def test_a_model_folder_is_served_with_token_ids(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1,
                                                         n_head=2)).save_pretrained(tmp_path)
    runner = load_runner(str(tmp_path))
    ids = [[1, 5, 7], [3, 4, 9]]
    with minidl.inference_mode():
        logits = runner.module(minidl.tensor(ids)).logits.numpy()
    with Server(runner) as running:
        both = httpx.post(f"{running.url}/v1/predict", json={"inputs": ids}, timeout=TIMEOUT)
        one = httpx.post(f"{running.url}/v1/predict", json={"inputs": ids[1]}, timeout=TIMEOUT)
    np.testing.assert_allclose(both.json()["outputs"], logits, rtol=0, atol=1e-6)
    np.testing.assert_allclose(one.json()["outputs"], logits[1], rtol=0, atol=1e-6)


def test_the_command_refuses_a_bad_spec_by_name(tmp_path):
    (tmp_path / "factory.py").write_text(FACTORY)
    done = subprocess.run([sys.executable, "-m", "minidl.serve", f"{tmp_path / 'factory.py'}:nothing"],
                          capture_output=True, timeout=60)
    assert done.returncode == 1 and b"has no callable 'nothing'" in done.stderr and b"Traceback" not in done.stderr


def test_a_failing_request_does_not_fail_those_batched_with_it():
    async def ask(url):
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            return await asyncio.gather(client.post(f"{url}/v1/predict", json={"inputs": [[1, 2], [3, 4]]}),
                                        client.post(f"{url}/v1/predict", json={"inputs": [[-99, 2], [3, 4]]}))
    with Server(Doubler(), max_wait_ms=200) as running:
        good, bad = asyncio.run(asyncio.wait_for(ask(running.url), 30))
        batches = running.app.state.metrics.batch_size
    assert good.json() == {"outputs": [[2, 4], [6, 8]]}
    assert bad.status_code == 422 and "returned 0 rows for 1 examples" in bad.json()["error"]
    assert batches.count == 3 and batches.sum == 4          # together, then each alone


def test_a_regular_nest_is_read_whole_and_bad_elements_are_still_named():
    image = np.random.default_rng(2).standard_normal((3, 32, 32))
    np.testing.assert_array_equal(to_array(image.tolist(), np.float32), image.astype(np.float32))
    for bad, words in [(True, "inputs[2][5][7]: true is not a number"), (None, "inputs[2][5][7]: null"),
                       ("x", 'inputs[2][5][7]: "x"'), ([1.0], "inputs[2][5] is ragged")]:
        nest = image.tolist()
        nest[2][5][7] = bad
        with pytest.raises(InputError, match=re.escape(words)):
            to_array(nest, np.float32)


@pytest.mark.parametrize("value, words", [
    ([[1, 2], [3, 4.5]], "inputs[1][1]: 4.5 is not a whole number, and the model takes int64"),
    ([1, float("nan")], "inputs[1]: nan is not a whole number"),
    ([1, float("inf")], "inputs[1]: inf is not a whole number"),
    (np.array([[0.0, 0.25]]), "inputs[0][1]: 0.25 is not a whole number"),     # (an array a preprocess hook made)
    ([2 ** 70], "does not fit int64"),
])
def test_integer_inputs_refuse_fractions_rather_than_truncate(value, words):
    with pytest.raises(InputError, match=re.escape(words)):
        to_array(value, np.int64)


def test_integer_inputs_take_whole_floats():
    got = to_array([[1, 2.0], [-3.0, 2 ** 40]], np.int64)
    assert got.dtype == np.int64 and got.tolist() == [[1, 2], [-3, 2 ** 40]]


def test_connections_are_marked_tcp_so_asyncio_sets_nodelay(server):
    """asyncio sets TCP_NODELAY on a connection only when its listening socket says IPPROTO_TCP (protocol 0 does not
    count); without it a kept-alive client's delayed ACK held each response back ~40 ms."""
    (listening,) = server._uvicorn.servers[0].sockets
    assert listening.type == socket.SOCK_STREAM and listening.proto == socket.IPPROTO_TCP


class Exits(nn.Module):
    """A model that raises SystemExit (a BaseException, not an Exception) on a negative first input."""

    def forward(self, x):
        if float(x[:, 0].min()) < 0:
            raise SystemExit("a model that exits")
        return x * 2


def test_a_model_raising_a_base_exception_answers_its_request_and_the_server_goes_on():
    with Server(Exits(), max_wait_ms=1) as running:
        bad = httpx.post(f"{running.url}/v1/predict", json={"inputs": [-1.0, 2.0]}, timeout=TIMEOUT)
        good = httpx.post(f"{running.url}/v1/predict", json={"inputs": [1.0, 2.0]}, timeout=TIMEOUT)
    assert bad.status_code == 422 and "SystemExit: a model that exits" in bad.json()["error"]
    assert good.status_code == 200 and good.json()["outputs"] == [2.0, 4.0]
