"""ONNX graphs served by minidl.serve: the digits CNN exported with a dynamic batch axis answers over HTTP as ONNX
Runtime and minidl do, concurrent requests share its runs, a batch-of-1 export runs one example at a time, and every
graph or file that cannot be served is refused by name."""
import asyncio
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

import minidl
from minidl.serve import OnnxRunner, Server
from minidl.serve.spec import SpecError, load_runner

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

TIMEOUT = httpx.Timeout(20.0)


def digits_cnn():
    """examples/train_digits.py's CNN (convolutions, BatchNorm with non-trivial running statistics, pooling)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    try:
        from train_digits import make_model
    finally:
        sys.path.pop(0)
    minidl.manual_seed(0)
    model = make_model("cnn")
    with minidl.no_grad():
        for module in model.modules():
            if isinstance(module, minidl.nn.BatchNorm2d):
                module.running_mean.copy_(minidl.randn(*module.running_mean.shape) * 0.1)
                module.running_var.copy_(minidl.rand(*module.running_var.shape) + 0.5)
    return model.eval()


@pytest.fixture(scope="module")
def cnn():
    return digits_cnn()


def export(model, path, batch, dynamic):
    minidl.onnx.export(model, (minidl.randn(batch, 1, 8, 8),), str(path), input_names=["images"],
                       output_names=["logits"],
                       dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}} if dynamic else None)
    return str(path)


@pytest.fixture(scope="module")
def dynamic_onnx(cnn, tmp_path_factory):
    return export(cnn, tmp_path_factory.mktemp("onnx") / "digits-cnn.onnx", 2, dynamic=True)


def images(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 1, 8, 8)).astype(np.float32)


def minidl_logits(model, x):
    with minidl.inference_mode():
        return model(minidl.from_numpy(x)).numpy()


def test_the_runner_reads_the_graph(dynamic_onnx):
    runner = load_runner(dynamic_onnx)
    assert isinstance(runner, OnnxRunner) and runner.kind == "onnx" and runner.name == "digits-cnn"
    assert runner.input_dtype == np.float32 and runner.example_ndim == 3 and not runner.one_at_a_time
    assert runner.describe()["input"] == "images" and runner.describe()["output"] == "logits"


def test_concurrent_requests_are_batched_and_answer_as_onnx_runtime_and_minidl(cnn, dynamic_onnx):
    x = images(24)
    session = onnxruntime.InferenceSession(dynamic_onnx, providers=["CPUExecutionProvider"])
    direct = session.run(None, {"images": x})[0]
    np.testing.assert_allclose(direct, minidl_logits(cnn, x), rtol=0, atol=1e-5)

    async def ask_all(url):
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            ones = asyncio.gather(*(client.post(f"{url}/v1/predict", json={"inputs": example.tolist()})
                                    for example in x))
            return await ones, await client.post(f"{url}/v1/predict", json={"inputs": x[:5].tolist()})

    with Server(load_runner(dynamic_onnx), max_batch_size=8, max_wait_ms=300) as running:
        answers, listed = asyncio.run(asyncio.wait_for(ask_all(running.url), 60))
        batches = running.app.state.metrics.batch_size
        (described,) = httpx.get(f"{running.url}/v1/models", timeout=TIMEOUT).json()["models"]
    assert [a.status_code for a in answers] == [200] * 24
    np.testing.assert_allclose([a.json()["outputs"] for a in answers], direct, rtol=0, atol=1e-5)
    np.testing.assert_allclose(listed.json()["outputs"], direct[:5], rtol=0, atol=1e-5)
    assert batches.sum == 29 and batches.count < 24                 # the 24 single examples shared runs
    assert described["kind"] == "onnx" and described["input_shape"] == ["batch", 1, 8, 8]


def test_a_wrong_example_shape_is_the_runtimes_error(dynamic_onnx):
    with Server(load_runner(dynamic_onnx)) as running:
        rank = httpx.post(f"{running.url}/v1/predict", json={"inputs": [1.0, 2.0]}, timeout=TIMEOUT)
        size = httpx.post(f"{running.url}/v1/predict", json={"inputs": np.zeros((1, 4, 4)).tolist()},
                          timeout=TIMEOUT)
    assert rank.status_code == 422 and "3 dimension(s)" in rank.json()["error"]
    assert size.status_code == 422 and "images" in size.json()["error"]


def test_a_batch_of_one_export_runs_one_example_at_a_time(cnn, tmp_path):
    runner = load_runner(export(cnn, tmp_path / "fixed.onnx", 1, dynamic=False))
    assert runner.one_at_a_time and runner.example_ndim == 3
    x = images(3, seed=1)
    with Server(runner) as running:
        answer = httpx.post(f"{running.url}/v1/predict", json={"inputs": x.tolist()}, timeout=TIMEOUT)
    np.testing.assert_allclose(answer.json()["outputs"], minidl_logits(cnn, x), rtol=0, atol=1e-5)


def graph(path, inputs, outputs, nodes):
    """A hand-written graph of float vectors (or what ``inputs`` and ``outputs`` say)."""
    model = onnx.helper.make_model(onnx.helper.make_graph(nodes, "g", inputs, outputs),
                                   opset_imports=[onnx.helper.make_opsetid("", 20)])
    onnx.save(model, str(path))
    return str(path)


def vector(name, dims=("batch", 4), kind=onnx.TensorProto.FLOAT):
    return onnx.helper.make_tensor_value_info(name, kind, list(dims))


def test_an_int64_graph_takes_whole_numbers_only(tmp_path):
    path = graph(tmp_path / "ids.onnx", [vector("ids", kind=onnx.TensorProto.INT64)],
                 [vector("twice", kind=onnx.TensorProto.INT64)], [onnx.helper.make_node("Add", ["ids", "ids"],
                                                                                         ["twice"])])
    runner = load_runner(path)
    assert runner.input_dtype == np.int64 and runner.example_ndim == 1
    with Server(runner) as running:
        good = httpx.post(f"{running.url}/v1/predict", json={"inputs": [[1, 2, 3, 4], [5, 6, 7, 2.0]]},
                          timeout=TIMEOUT)
        bad = httpx.post(f"{running.url}/v1/predict", json={"inputs": [[1, 2, 3, 4], [5, 6, 7.5, 8]]},
                         timeout=TIMEOUT)
    assert good.json() == {"outputs": [[2, 4, 6, 8], [10, 12, 14, 4]]}
    assert bad.status_code == 422 and "inputs[1][2]: 7.5 is not a whole number" in bad.json()["error"]


@pytest.mark.parametrize("inputs, outputs, nodes, words", [
    ([vector("a"), vector("b")], [vector("c")], [onnx.helper.make_node("Add", ["a", "b"], ["c"])],
     "2 inputs (a, b) and 1 outputs (c)"),
    ([vector("a")], [vector("b"), vector("c")], [onnx.helper.make_node("Relu", ["a"], ["b"]),
                                                 onnx.helper.make_node("Neg", ["a"], ["c"])],
     "1 inputs (a) and 2 outputs (b, c)"),
    ([vector("a", (2, 4))], [vector("b", (2, 4))], [onnx.helper.make_node("Relu", ["a"], ["b"])],
     "a fixed batch of 2"),
    ([vector("a", ())], [vector("b", ())], [onnx.helper.make_node("Relu", ["a"], ["b"])], "no batch axis"),
    ([vector("a", kind=onnx.TensorProto.STRING)], [vector("b", kind=onnx.TensorProto.STRING)],
     [onnx.helper.make_node("Identity", ["a"], ["b"])], "tensor(string)"),
])
def test_a_graph_that_cannot_be_served_is_refused_by_name(tmp_path, inputs, outputs, nodes, words):
    path = graph(tmp_path / "g.onnx", inputs, outputs, nodes)
    with pytest.raises(SpecError, match="g.onnx") as refused:
        load_runner(path)
    assert words in str(refused.value)


def test_a_bad_onnx_file_is_a_spec_error(tmp_path, dynamic_onnx):
    (tmp_path / "junk.onnx").write_bytes(b"not a protobuf at all")
    with pytest.raises(SpecError, match="ONNX Runtime cannot load .*junk.onnx"):
        load_runner(str(tmp_path / "junk.onnx"))
    with pytest.raises(SpecError, match="missing.onnx: no such file"):
        load_runner(str(tmp_path / "missing.onnx"))
    with pytest.raises(SpecError, match="holds its own weights"):
        load_runner(dynamic_onnx, weights="w.safetensors")
    with pytest.raises(SpecError, match="example_ndim 1 does not match"):
        load_runner(dynamic_onnx, example_ndim=1)
