"""minidl.onnx.export against ONNX Runtime, an independent implementation of every op it emits:
five models of the README (an MLP, the digits CNN with BatchNorm, an LSTM language model, a
TransformerEncoder and the char-GPT) give ONNX Runtime's outputs equal to minidl's at two batch
sizes and two sequence lengths; sizes read while tracing stay dynamic; what cannot be traced
warns or fails naming the op, the module and the opset."""
import io
import math
import re
import subprocess
import sys
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest

import minidl
from example_runs import ROOT, run_example
from minidl import nn
from minidl.onnx import OnnxExporterError, TracerWarning

sys.path.insert(0, str(ROOT / "examples"))
from char_gpt import GPT  # noqa: E402
from train_digits import make_model  # noqa: E402

sys.path.pop(0)


def run(model_bytes, *inputs):
    """ONNX Runtime's outputs for ``inputs`` (minidl tensors)."""
    session = onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {n: t.numpy() for n, t in zip(names, inputs)})


def exported(model, args, axes, **kwargs):
    """The ONNX bytes of ``model`` traced on ``args``, every input and output dynamic along ``axes``."""
    names = [f"in{i}" for i in range(len(args))]
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TracerWarning)   # (the models' shape checks: fixed, as expected)
        minidl.onnx.export(model, tuple(args), buffer, input_names=names, output_names=["out"],
                           dynamic_axes={**{n: axes for n in names}, "out": axes}, **kwargs)
    return buffer.getvalue()


class LanguageLSTM(nn.Module):
    def __init__(self, vocab=20):
        super().__init__()
        self.embed, self.lstm = nn.Embedding(vocab, 8), nn.LSTM(8, 16, 2, batch_first=True)
        self.head = nn.Linear(16, vocab)

    def forward(self, idx):
        return self.head(self.lstm(self.embed(idx))[0])


def _digits_cnn():
    model = make_model("cnn")
    model.train()
    with minidl.no_grad():
        for _ in range(3):   # (running statistics that are not the initial ones)
            model(minidl.randn(16, 1, 8, 8) * 2 + 0.5)
    return model


MODELS = {   # name: (model maker, inputs maker for (batch, seq), sizes to compare, dynamic axes, tolerance)
    "mlp": (lambda: make_model("mlp"), lambda n, t: (minidl.randn(n, 1, 8, 8),), [(4, 0), (9, 0)], {0: "n"}, 1e-5),
    "cnn": (_digits_cnn, lambda n, t: (minidl.randn(n, 1, 8, 8),), [(4, 0), (9, 0)], {0: "n"}, 1e-5),
    "lstm": (LanguageLSTM, lambda n, t: (minidl.randint(0, 20, (n, t)),), [(3, 5), (6, 9)], {0: "n", 1: "t"}, 1e-5),
    "encoder": (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2),
                lambda n, t: (minidl.randn(n, t, 16),), [(3, 5), (6, 9)], {0: "n", 1: "t"}, 1e-4),
    "char_gpt": (lambda: GPT(30, 16, 32, 4, 2, 0.1), lambda n, t: (minidl.randint(0, 30, (n, t)),),
                 [(3, 5), (6, 9)], {0: "n", 1: "t"}, 1e-4),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_onnx_runtime_computes_what_minidl_computes(name):
    make_model_, make_inputs, sizes, axes, tol = MODELS[name]
    minidl.manual_seed(0)
    model = make_model_()
    assert model.training
    data = exported(model, make_inputs(*sizes[0]), axes)
    assert model.training, "export traces in eval mode, then gives the model its mode back (as torch's)"
    model.eval()
    for size in sizes:   # (the second size was never traced: the dynamic axes carry it)
        inputs = make_inputs(*size)
        with minidl.no_grad():
            want = model(*inputs).numpy()
        got = run(data, *inputs)[0]
        assert got.shape == want.shape and np.abs(got - want).max() <= tol, (name, size, np.abs(got - want).max())


class Sizes(nn.Module):
    """Reads sizes and computes with them, as the char-GPT does (``t = idx.shape[1]``)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", minidl.randn(16, 16))

    def forward(self, x):   # (b, t, 4)
        b, t = x.shape[0], x.size(1)
        stretched = x.reshape(b, t * 2, -1)[:, : t + t // 2]        # arithmetic on sizes, -1, slicing by them
        mixed = self.table[:t, :t] @ x.mean(-1, keepdim=True)       # a buffer cut to the traced length
        ramp = minidl.arange(t).to(x.dtype).expand(b, -1)          # arange(t)
        return stretched, mixed.squeeze(-1) + ramp, x.view(b * t, -1), minidl.zeros(b, t - 1)


def test_sizes_read_while_tracing_stay_dynamic():
    model = Sizes()
    buffer = io.BytesIO()
    minidl.onnx.export(model, (minidl.randn(2, 6, 4),), buffer, input_names=["x"],
                       dynamic_axes={"x": {0: "b", 1: "t"}})
    proto = onnx.load_from_string(buffer.getvalue())
    assert {"Shape", "Range", "Slice", "ConstantOfShape"} <= {n.op_type for n in proto.graph.node}
    for b, t in ((3, 9), (1, 2)):
        x = minidl.randn(b, t, 4)
        want = model(x)
        got = run(buffer.getvalue(), x)
        assert [g.shape for g in got] == [tuple(w.shape) for w in want]
        assert all(np.allclose(g, w.numpy(), atol=1e-5) for g, w in zip(got, want))


class Branchy(nn.Module):
    def forward(self, x):
        if x.shape[1] > 3:   # a Python branch on a size: fixed at export
            x = x * 2
        if x.sum() > 0:      # and on a tensor's value
            x = x + 1
        return x


def test_a_branch_on_a_traced_value_is_fixed_with_a_warning():
    with pytest.warns(TracerWarning) as caught:
        program = minidl.onnx.export(Branchy(), (minidl.ones(2, 5),), dynamic_axes={"x": {1: "t"}})
    messages = [str(w.message) for w in caught]
    assert any("a traced size compared with >" in m for m in messages)
    assert any("a traced tensor read by Tensor.__bool__" in m for m in messages)
    assert all(w.filename == __file__ for w in caught), "the warning points at the model's line"
    short = -minidl.ones(2, 2)   # eager: neither branch; the graph took both while tracing
    assert np.array_equal(program(short)[0], short.numpy() * 2 + 1)
    assert np.array_equal(Branchy()(short).numpy(), short.numpy())


class Cumulative(nn.Module):
    def forward(self, x):
        return x.cumprod(1)


def test_an_op_without_a_lowering_is_named_with_its_module_and_the_opset():
    model = nn.Sequential(nn.Linear(3, 3), Cumulative())
    with pytest.raises(OnnxExporterError, match=r"op 'cumprod' in module '1' \(Cumulative\) has no ONNX lowering "
                                                r"\(opset 18\)"):
        minidl.onnx.export(model, (minidl.randn(2, 3),), opset_version=18)
    pool = nn.AvgPool2d(2, ceil_mode=True, divisor_override=3)
    with pytest.raises(OnnxExporterError, match=r"avg_pool2d\(divisor_override=..., ceil_mode=True\) is not "
                                                r"lowered \(op 'avg_pool2d' in module 'the model itself' "
                                                r"\(AvgPool2d\), opset 20\)"):
        minidl.onnx.export(pool, (minidl.randn(1, 1, 4, 4),))


def test_an_unused_op_without_a_lowering_costs_nothing():
    class Unused(nn.Module):
        def forward(self, x):
            x.cumprod(1)   # (computed, never used: nothing to lower)
            return x * 2
    x = minidl.randn(2, 3)
    assert np.array_equal(minidl.onnx.export(Unused(), (x,))(x)[0], x.numpy() * 2)


def test_export_options(tmp_path):
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    x = minidl.randn(2, 4)
    path = tmp_path / "m.onnx"
    assert minidl.onnx.export(model, x, path, dynamo=False) is None   # (torch's legacy exporter returns None)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert [i.name for i in proto.graph.input] == ["input"] and proto.opset_import[0].version == 20
    assert sorted(i.name for i in proto.graph.initializer) == ["0.bias", "0.weight"]
    bare = minidl.onnx.export(model, (x,), export_params=False).model_proto
    assert [i.name for i in bare.graph.input] == ["input", "0.weight", "0.bias"] and not bare.graph.initializer
    w, b = (p.detach() for p in model[0].parameters())
    assert np.allclose(run(bare.SerializeToString(), x, w, b)[0], model(x).detach().numpy(), atol=1e-6)
    listed = minidl.onnx.export(model, (x,), keep_initializers_as_inputs=True).model_proto
    assert {i.name for i in listed.graph.input} == {"input", "0.weight", "0.bias"}
    assert len(listed.graph.initializer) == 2
    assert minidl.onnx.export(model, (x,), opset_version=18).model_proto.opset_import[0].version == 18
    with pytest.raises(ValueError, match="opset_version=17; minidl exports opsets 18 to"):
        minidl.onnx.export(model, (x,), opset_version=17)
    with pytest.raises(NotImplementedError, match="dynamic_shapes= is not supported: minidl has one exporter"):
        minidl.onnx.export(model, (x,), dynamic_shapes={"x": {0: "b"}})


def test_tracing_leaves_nothing_behind_even_when_the_model_raises():
    seen = []

    class Failing(nn.Module):
        def forward(self, x):
            seen.append(minidl.onnx.is_in_onnx_export())
            raise RuntimeError("boom")
    plain_shape = minidl.Tensor.shape
    with pytest.raises(RuntimeError, match="boom"):
        minidl.onnx.export(Failing(), (minidl.randn(2),))
    assert seen == [True] and not minidl.onnx.is_in_onnx_export() and minidl.Tensor.shape is plain_shape
    assert type(minidl.randn(2, 3).shape[0]) is int and nn.Module.__call__.__name__ == "__call__"


@pytest.mark.parametrize("cls, options", [(nn.GRU, {}), (nn.RNN, {"nonlinearity": "relu"}),
                                          (nn.LSTM, {"bidirectional": True}),
                                          (nn.GRU, {"bidirectional": True, "batch_first": True})])
def test_recurrent_modules_are_their_onnx_nodes(cls, options):
    model = cls(5, 7, num_layers=2, **options)
    data = exported(model, (minidl.randn(3, 4, 5),), {0: "a", 1: "b"})
    assert {n.op_type for n in onnx.load_from_string(data).graph.node} >= {cls.__name__}
    for shape in ((3, 4, 5), (6, 2, 5)):
        x = minidl.randn(*shape)
        want = model(x)
        got = run(data, x)
        assert np.allclose(got[0], want[0].detach().numpy(), atol=1e-5)   # (the states' axes were not declared)


def test_an_lstm_with_initial_states_and_an_unbatched_gru():
    lstm = nn.LSTM(5, 7, num_layers=2)
    x, h, c = minidl.randn(4, 3, 5), minidl.randn(2, 3, 7), minidl.randn(2, 3, 7)

    class WithState(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = lstm

        def forward(self, x, h, c):
            out, (h, c) = self.lstm(x, (h, c))
            return out, h, c
    got = minidl.onnx.export(WithState(), (x, h, c))(x, h, c)
    assert all(np.allclose(g, w.detach().numpy(), atol=1e-5) for g, w in zip(got, WithState()(x, h, c)))
    gru, x = nn.GRU(5, 7), minidl.randn(4, 5)
    got = minidl.onnx.export(gru, (x,))(x)
    assert all(np.allclose(g, w.detach().numpy(), atol=1e-5) for g, w in zip(got, gru(x)))


def test_import_minidl_onnx_works_without_the_onnx_package():
    code = ("import sys; sys.modules['onnx'] = None\n"
            "import minidl, minidl.onnx\n"
            "try:\n    minidl.onnx.export(minidl.nn.Linear(2, 2), (minidl.randn(1, 2),))\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert 'minidl.onnx.export needs the onnx package: pip install "minidl[onnx]"' in out.stdout


def test_the_export_example_runs_both_models_in_onnx_runtime(tmp_path):
    code, out = run_example("export_onnx.py", "--out", str(tmp_path), "--length", "12", cwd=tmp_path)
    assert code == 0, out
    accuracy = re.search(r"accuracy ([\d.]+) \(minidl ([\d.]+)\)", out)
    assert accuracy.group(1) == accuracy.group(2) and float(accuracy.group(1)) > 0.5
    assert "same text: True" in out and (tmp_path / "char-gpt.onnx").exists() and "TracerWarning" not in out


# the registry samples of lowered ops that export refuses, and why (each a clear OnnxExporterError)
REFUSED = {
    "strided_scatter": "an internal Function (a narrow's backward)", "strided_scatter-noncontig": "the same",
    "gate": "relu's backward Function", "gate-broadcast": "the same",
    "unreduce": "sum's backward Function", "unreduce-keepdim": "the same",
    "flip_view": "minidl's negative-stride view, not a public op", "flip_view-2dims": "the same",
    "inplace-unary-on-view": "an in-place write through a view", "inplace-mul-on-view": "the same",
    "inplace-twins-nonleaf": "atan2 has no lowering",
    "getitem-bool-mask": "a boolean mask's result size depends on the data", "getitem-mask-row-slice": "the same",
    "getitem-nonadjacent": "several index tensors", "getitem-negative-index-tensor": "the same",
    "batch_norm-training": "batch statistics (training mode)", "batch_norm-training-2d-weight": "the same",
    "index_put-none": "index_put with a None index (a whole dim) among the index tensors",
    "norm-nuc": "singular values (ONNX has no SVD)", "matrix-norm-nuc": "the same",
}


# (samples that run a backward themselves)
DIFFERENTIATING = {"conv2d-input-only", "max_pool2d-backward", "max_pool1d-backward", "max_pool3d-backward"}


def _registry_samples():
    from opinfo import FIRST_ORDER
    from minidl.ops.registry import OPS
    return [(name, s) for name, s in FIRST_ORDER if "onnx" in OPS[name].rules and s.name not in DIFFERENTIATING]


@pytest.mark.parametrize("name, sample", _registry_samples(), ids=lambda v: getattr(v, "name", v))
def test_every_lowered_op_on_its_registry_samples(name, sample):
    """Each op with a lowering, on the samples it declares for the op sweep (float32; strided
    inputs included): ONNX Runtime computes what minidl computes, or export refuses clearly."""
    from opinfo import NC, make_leaf
    leaves = [make_leaf(spec, spec.values if isinstance(spec, NC) else spec, requires_grad=False, dtype=np.float32)
              for spec in sample.inputs]
    with minidl.no_grad():
        want = sample.fn(*leaves)
    outs = [want] if isinstance(want, minidl.Tensor) else list(want)
    names = [f"out{i}" for i in range(len(outs))]
    if sample.name in REFUSED:
        with pytest.raises(OnnxExporterError):
            minidl.onnx.export(sample.fn, tuple(leaves), output_names=names)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TracerWarning)   # (squeeze()'s, on its sample: expected)
        program = minidl.onnx.export(sample.fn, tuple(leaves), output_names=names)
    got = run(program.model_proto.SerializeToString(), *leaves)
    assert len(got) == len(outs)
    for g, w in zip(got, outs):
        assert g.shape == tuple(w.shape) and g.dtype == w.numpy().dtype
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)


class PaddedSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x, padding):
        return self.attn(x, x, x, key_padding_mask=padding, need_weights=False)[0]


def test_attention_rows_that_no_key_may_see_are_zeros_in_onnx_too():
    """The fused attention's lowering where the mask leaves a query no key (a batch row all padding): zeros,
    as the kernel gives, where ONNX's Softmax alone would give NaN."""
    minidl.manual_seed(0)
    model = PaddedSelfAttention().eval()
    nn.init.normal_(model.attn.out_proj.bias)       # (zeros out of the attention become the bias, not 0)
    padding = minidl.tensor([[False, False, True, False, True], [True] * 5, [False] * 5])
    inputs = (minidl.randn(3, 5, 8), padding)
    with minidl.no_grad():
        want = model(*inputs).numpy()
    got = run(exported(model, inputs, {0: "n", 1: "t"}), *inputs)[0]
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_another_threads_ops_are_not_recorded():
    import threading

    class Busy(nn.Module):
        def forward(self, x):
            worker = threading.Thread(target=lambda: [x * 3 for _ in range(20)])   # (on the traced input, even)
            worker.start()
            out = x + 1
            worker.join()
            return out
    x = minidl.randn(2, 3)
    program = minidl.onnx.export(Busy(), (x,))
    assert [n.op_type for n in program.model_proto.graph.node] == ["Add", "Identity"]
    assert np.allclose(program(x)[0], x.numpy() + 1)


IDIOMS = {   # name: (function of x, x's dtype), traced at (2, 4) and run at (3, 9) with both axes dynamic
    "size-in-arithmetic": (lambda x: x.sum(1) / x.shape[1] + x[:, 0] * x.shape[1] - (x.size(1) - x[:, 1]), "f"),
    "arange-over-size": (lambda x: minidl.arange(x.shape[1]) / x.shape[1] + x, "f"),
    "numel": (lambda x: x.sum() / x.numel(), "f"),
    "var-std": (lambda x: x.var(1) + x.std(1, unbiased=False) + x.var(), "f"),
    "narrow-from-the-end": (lambda x: x.narrow(1, -2, 2), "f"),
    "floor-division": (lambda x: (x // 2) + minidl.div(x, -3, rounding_mode="floor") + x.floor_divide(4), "i"),
    "int-against-float": (lambda x: (x < 0.5).int() + (x == 0.5).int() + (x >= 0.5).int() + ((x > 0) == 2).int(),
                          "i"),
    "chunk": (lambda x: x.chunk(2, 1)[0] * 2, "f"),
    "floor-of-negative-size": (lambda x: x[:, -x.shape[1] // 2:], "f"),
    "view-batch-flat": (lambda x: x.view(x.size(0), -1).unsqueeze(-1).expand(-1, -1, x.shape[1]).sum(-1), "f"),
}


@pytest.mark.parametrize("name", list(IDIOMS))
def test_what_a_traced_size_computes_follows_the_input(name):
    fn, kind = IDIOMS[name]

    def make(*shape):
        return minidl.randint(-5, 6, shape) if kind == "i" else minidl.randn(*shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TracerWarning)   # (none of these is fixed at export)
        program = minidl.onnx.export(fn, (make(2, 4),), input_names=["x"], dynamic_axes={"x": {0: "b", 1: "t"}})
    x = make(3, 9)
    got, want = program(x)[0], fn(x).numpy()
    assert got.shape == want.shape and np.allclose(got, want, atol=1e-5), name


@pytest.mark.parametrize("fn, what", [(lambda x: x * math.sqrt(x.shape[1]), "turned into float()"),
                                      (lambda x: x * (x.shape[1] / 2), "divided with /"),
                                      (lambda x: x * len(x), "Tensor.__len__"),
                                      (lambda x: x.split(2, 1)[0], "split(x, size)"),
                                      (lambda x: x.squeeze(), "squeeze() of a traced tensor")])
def test_what_a_traced_size_cannot_follow_warns(fn, what):
    with pytest.warns(TracerWarning, match=re.escape(what)):
        minidl.onnx.export(fn, (minidl.randn(1, 4),), input_names=["x"], dynamic_axes={"x": [0, 1]})


def test_outputs_not_named_in_dynamic_axes_take_their_inferred_sizes():
    gru, x = nn.GRU(5, 7), minidl.randn(5, 5)   # (unbatched: the time axis runs through the whole graph)
    program = minidl.onnx.export(gru, (x,), input_names=["x"], dynamic_axes={"x": {0: "t"}})
    outputs = program.model_proto.graph.output
    dims = [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in outputs]
    assert dims == [["t", 7], [1, 7]]
    x = minidl.randn(7, 5)
    assert all(np.allclose(g, w.detach().numpy(), atol=1e-5) for g, w in zip(program(x), gru(x)))


def test_parameters_given_as_inputs_are_not_folded():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(minidl.randn(3, 2))

        def forward(self, x):
            return x @ (self.w * 0.5)   # (work on a parameter: in the graph, not a constant)
    model, x = Scaled(), minidl.randn(4, 3)
    program = minidl.onnx.export(model, (x,), export_params=False)
    other = minidl.randn(3, 2)
    assert np.allclose(program(x, other)[0], (x @ (other * 0.5)).numpy(), atol=1e-6)


def test_an_item_in_another_thread_leaves_the_trace_alone():
    import threading
    import time
    slow = minidl.randn(1000)

    class Model(nn.Module):
        def forward(self, x):
            reader = threading.Thread(target=lambda: [slow.tolist() for _ in range(20)])
            reader.start()
            time.sleep(0.01)
            out = x * 2 + 1
            reader.join()
            return out
    x = minidl.randn(3)
    program = minidl.onnx.export(Model(), (x,))
    assert [n.op_type for n in program.model_proto.graph.node] == ["Mul", "Add", "Identity"]
    assert np.allclose(program(minidl.ones(3))[0], 3.0)


def test_modes_names_and_pickling_after_export():
    import pickle
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    model[1].eval()   # (a submodule in its own mode)
    with pytest.warns(UserWarning, match=r"dynamic_axes names \['inptu'\], which are no input or output name"):
        minidl.onnx.export(model, (minidl.randn(1, 2),), dynamic_axes={"inptu": [0]})
    assert model.training and not model[1].training
    assert all(pickle.loads(pickle.dumps(f)) is f for f in (minidl.relu, minidl.tanh, minidl.add, minidl.sigmoid))


@pytest.mark.parametrize("p", [0, 1, 2, 3.5, -1.5, math.inf, -math.inf])
def test_every_p_norm_order_in_onnx_is_torchs(p):
    """norm, dist, pairwise_distance and pdist share one p-norm lowering: ONNX Runtime gives torch's values for
    every order, with zero magnitudes (a negative order's 0) and a zero row difference among them."""
    import torch
    import torch.nn.functional as TF
    x = np.array([[0.0, 1.5, -2.0], [0.5, 0.0, 3.0], [0.5, 0.0, 3.0], [-1.0, 2.0, 0.25]], np.float32)
    y = np.array([[1.0, -0.5, 0.0], [0.5, 2.0, -1.0], [0.0, 1.0, 1.0], [2.0, 0.0, 0.5]], np.float32)
    cases = [(lambda a, b: minidl.norm(a, p, dim=1), lambda a, b: torch.norm(a, p, dim=1)),
             (lambda a, b: a.dist(b, p), lambda a, b: torch.dist(a, b, p)),
             (lambda a, b: minidl.linalg.vector_norm(a, p), lambda a, b: torch.linalg.vector_norm(a, p)),
             (lambda a, b: nn.functional.pairwise_distance(a, b, p, eps=0.0),
              lambda a, b: TF.pairwise_distance(a, b, p, eps=0.0))]
    if p >= 0:
        cases.append((lambda a, b: nn.functional.pdist(a, p), lambda a, b: TF.pdist(a, p)))
    for ours, theirs in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TracerWarning)   # (vector_norm's check for an empty dim at +-inf)
            program = minidl.onnx.export(ours, (minidl.tensor(x), minidl.tensor(y)), output_names=["out"])
        got = run(program.model_proto.SerializeToString(), minidl.tensor(x), minidl.tensor(y))[0]
        np.testing.assert_allclose(got, theirs(torch.tensor(x), torch.tensor(y)).numpy(), rtol=1e-5, atol=1e-6)
