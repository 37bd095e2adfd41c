"""The fused recurrent layers (F._recurrence: one autograd node per layer and direction, one rnn_cell kernel per
step each way) against PyTorch in float64 (outputs, final states, every gradient) and against the same step
composed of minidl's elementwise ops, which is how the layers ran before; and their errors."""
from __future__ import annotations

import re

import numpy as np
import pytest
from test_rnn import _match_torch
from test_sdpa_fused import count_calls

import minidl
import minidl.onnx
import minidl.nn.functional as F
from minidl import kernels, nn

NAMES = ("rnn_cell", "rnn_cell_backward")


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def calls(monkeypatch):
    return count_calls(monkeypatch, "cpu", NAMES)


def _arrays(cls, kwargs, rng, seq=6, batch=3, features=5, hidden=7):
    layers = (2 if kwargs.get("bidirectional") else 1) * kwargs.get("num_layers", 1)
    x = rng.standard_normal((batch, seq, features) if kwargs.get("batch_first") else (seq, batch, features))
    states = [rng.standard_normal((layers, batch, hidden)) for _ in range(2 if cls == "LSTM" else 1)]
    return [x] + states


@pytest.mark.parametrize("cls, kwargs", [
    ("LSTM", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("LSTM", {"num_layers": 2, "bias": False}),
    ("GRU", {"num_layers": 2, "bidirectional": True}),
    ("GRU", {"batch_first": True}),
    ("RNN", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("RNN", {"nonlinearity": "relu", "num_layers": 2}),
])
def test_layers_match_torch_in_float64_with_one_kernel_per_step(torch, calls, cls, kwargs):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    theirs = getattr(torch.nn, cls)(5, 7, **kwargs).double()
    mine = getattr(nn, cls)(5, 7, **kwargs).double()
    _match_torch(torch, mine, theirs, _arrays(cls, kwargs, rng), rng)
    steps = 6 * kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    assert calls == {"rnn_cell": steps, "rnn_cell_backward": steps}


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
def test_float32_matches_torch(torch, cls):
    rng = np.random.default_rng(1)
    theirs = getattr(torch.nn, cls)(5, 7, num_layers=2, bidirectional=True)
    mine = getattr(nn, cls)(5, 7, num_layers=2, bidirectional=True)
    mine.load_state_dict({k: minidl.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    x = rng.standard_normal((6, 3, 5)).astype(np.float32)
    m_x, t_x = minidl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    m_out, t_out = mine(m_x)[0], theirs(t_x)[0]
    np.testing.assert_allclose(m_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-5, atol=1e-5)
    (m_out ** 2).sum().backward()
    (t_out ** 2).sum().backward()
    np.testing.assert_allclose(m_x.grad.numpy(), t_x.grad.numpy(), rtol=1e-4, atol=1e-4)
    for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-4, err_msg=name)


# -- against the composition of elementwise ops ------------------------------------------------------
def _composed(gx, h0, c0, w_hh, b_hh, mode, reverse):
    """The recurrence as the layers computed it before the kernel: a step of minidl ops per time step."""
    h, c, outs = h0, c0, [None] * gx.shape[0]
    for t in (reversed(range(gx.shape[0])) if reverse else range(gx.shape[0])):
        gh = F.linear(h, w_hh, b_hh)
        if mode == "LSTM":
            i, f, g, o = (gx[t] + gh).chunk(4, -1)
            c = f.sigmoid() * c + i.sigmoid() * g.tanh()
            h = o.sigmoid() * c.tanh()
        elif mode == "GRU":
            (x_r, x_z, x_n), (h_r, h_z, h_n) = gx[t].chunk(3, -1), gh.chunk(3, -1)
            r, z = (x_r + h_r).sigmoid(), (x_z + h_z).sigmoid()
            n = (x_n + r * h_n).tanh()
            h = (1 - z) * n + z * h
        else:
            h = (gx[t] + gh).tanh() if mode == "RNN_TANH" else (gx[t] + gh).relu()
        outs[t] = h
    return (minidl.stack(outs), h) + ((c,) if mode == "LSTM" else ())


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN_TANH", "RNN_RELU"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("used", ["all", "output only", "final state only"])
def test_recurrence_matches_the_composed_steps(mode, reverse, used, rng):
    G = {"LSTM": 4, "GRU": 3}.get(mode, 1)
    T, B, H = 5, 3, 4
    arrays = [rng.standard_normal((T, B, G * H)), rng.standard_normal((B, H)), rng.standard_normal((B, H)),
              rng.standard_normal((G * H, H)), rng.standard_normal(G * H)]
    results, grads = [], []
    for fn in (F._recurrence, _composed):
        leaves = [minidl.tensor(a, requires_grad=True) for a in arrays]
        if mode != "LSTM":
            leaves[2] = None
        out = fn(*leaves, mode, reverse)
        picked = {"all": out, "output only": out[:1], "final state only": out[1:]}[used]
        sum(((o * o).sum() for o in picked), minidl.tensor(0.0, dtype=minidl.float64)).backward()
        results.append([o.detach().numpy() for o in out])
        grads.append([None if t is None or t.grad is None else t.grad.numpy() for t in leaves])
    for mine, composed in zip(results[0], results[1], strict=True):
        np.testing.assert_allclose(mine, composed, rtol=1e-12, atol=1e-12)
    for mine, composed in zip(grads[0], grads[1], strict=True):
        if composed is None:
            assert mine is None or not np.any(mine)
        else:
            np.testing.assert_allclose(mine, composed, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("cls, kwargs", [("LSTMCell", {}), ("GRUCell", {"bias": False}),
                                         ("RNNCell", {"nonlinearity": "relu"})])
def test_cells_run_the_gate_kernel_once_each_way(torch, calls, cls, kwargs):
    rng = np.random.default_rng(2)
    theirs, mine = getattr(torch.nn, cls)(3, 4, **kwargs).double(), getattr(nn, cls)(3, 4, **kwargs).double()
    arrays = [rng.standard_normal((2, 3))] + [rng.standard_normal((2, 4)) for _ in range(2 if cls == "LSTMCell" else 1)]
    _match_torch(torch, mine, theirs, arrays, rng)
    assert calls == {"rnn_cell": 1, "rnn_cell_backward": 1}


# -- errors ------------------------------------------------------------------------------------------
def test_a_differentiable_backward_is_a_clear_error():
    """create_graph through the node is refused when the backward runs (PyTorch's cuDNN RNN refuses the
    second backward instead)."""
    lstm = nn.LSTM(3, 4).double()
    x = minidl.randn(5, 2, 3, dtype=minidl.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="fused LSTM/GRU/RNN backward is not differentiable"):
        minidl.autograd.grad(lstm(x)[0].sum(), x, create_graph=True)


def test_recurrence_names_bad_arguments():
    gx, h, w = minidl.randn(5, 2, 16), minidl.randn(2, 4), minidl.randn(16, 4)
    with pytest.raises(ValueError, match="recurrence: unknown mode 'RNN'"):
        F._recurrence(gx, h, None, w, None, "RNN")
    with pytest.raises(ValueError, match=re.escape("recurrence: mode GRU expects gx (T >= 1, B, 3*H)")):
        F._recurrence(gx, h, None, w, None, "GRU")
    with pytest.raises(ValueError, match=re.escape("c0 None")):
        F._recurrence(gx, h, None, w, None, "LSTM")
    with pytest.raises(TypeError, match="recurrence: expected floating-point tensors of one dtype"):
        F._recurrence(gx, h.double(), h, w, None, "LSTM")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_layers_compute_in_float32(dtype):
    """Close to the float32 layer on the same (rounded) weights and input (the half layer also rounds its input
    projections)."""
    half = getattr(minidl, dtype)
    lstm = nn.LSTM(3, 4, num_layers=2)
    x = minidl.randn(5, 2, 3).to(half).float()
    with minidl.no_grad():
        for p in lstm.parameters():
            p.copy_(p.to(half).float())
    expected = lstm(x)[0].detach().numpy()
    got = lstm.to(half)(x.to(half))[0]
    assert got.dtype is half
    tol = 1e-2 if dtype == "bfloat16" else 2e-3
    np.testing.assert_allclose(got.detach().float().numpy(), expected, rtol=tol, atol=tol)


def test_gate_kernels_check_their_buffers():
    """(The checks are kernels/checks.py's, shared by both devices.)"""
    cell, backward = kernels.get("rnn_cell", "cpu"), kernels.get("rnn_cell_backward", "cpu")
    f = np.zeros(8 * 4, np.float64)
    row = np.zeros(8, np.float64)
    with pytest.raises(ValueError, match="rnn_cell: unknown mode 'lstm'"):
        cell("lstm", f, f, None, None, row, row, row, f, 4)
    with pytest.raises(ValueError, match="rnn_cell: mode LSTM needs cx of 8 float64 elements, got None"):
        cell("LSTM", f, f, None, None, None, row, row, f, 4)
    with pytest.raises(ValueError, match="rnn_cell: hidden=3 must be a positive integer"):
        cell("LSTM", f, f, None, None, row, row, row, f, 3)
    with pytest.raises(ValueError, match="rnn_cell_backward: mode GRU needs dgh of 24 float64 elements, got a "
                                         "buffer of 8"):
        backward("GRU", row, None, None, row, None, None, None, f, f[:24], row, row, None, 4)
    with pytest.raises(TypeError, match="float32 or float64 buffers only, got int64"):
        cell("RNN_TANH", f.astype(np.int64), f, None, None, None, row, None, None, 16)


# -- ONNX ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls, kwargs", [("LSTMCell", {}), ("GRUCell", {"bias": False}),
                                         ("RNNCell", {"nonlinearity": "relu"})])
@pytest.mark.parametrize("batch", [(2,), ()])
def test_cells_export_to_onnx_as_one_step_nodes(cls, kwargs, batch):
    """(The fused node has no lowering of its own: a cell exports whole, as ONNX's LSTM/GRU/RNN over one step.)"""
    pytest.importorskip("onnx")
    cell = getattr(nn, cls)(3, 4, **kwargs)
    x = minidl.randn(*batch, 3)
    states = [minidl.randn(*batch, 4) for _ in range(2 if cls == "LSTMCell" else 1)]
    program = minidl.onnx.export(cell, (x, tuple(states) if cls == "LSTMCell" else states[0]))
    expected = _as_tuple(cell(x, tuple(states) if cls == "LSTMCell" else states[0]))
    got = program(x, *states)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e.detach().numpy(), rtol=1e-5, atol=1e-5)


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_threaded_gate_kernels_match_the_serial_ones(monkeypatch, mode, rng):
    """Large enough for the parallel kernels (blocks of whole rows), with two threads: the same results."""
    from minidl.kernels.cpu import rnn as cpu_rnn
    monkeypatch.setattr(cpu_rnn, "_BLOCK", 64)                # several blocks of rows at this size
    T, B, H = 3, 9, 16
    arrays = [rng.standard_normal(s) for s in ((T, B, {"LSTM": 4, "GRU": 3}[mode] * H), (B, H), (B, H),
                                                ({"LSTM": 4, "GRU": 3}[mode] * H, H))]
    results = []
    for threads, min_size in ((1, 1 << 62), (2, 1)):
        monkeypatch.setattr("minidl.kernels.cpu.strided.PARALLEL_MIN", min_size)
        previous = minidl.get_num_threads()
        minidl.set_num_threads(threads)
        try:
            leaves = [minidl.tensor(a, requires_grad=True) for a in arrays]
            out = F._recurrence(leaves[0], leaves[1], leaves[2] if mode == "LSTM" else None, leaves[3], None, mode)
            (out[0] * out[0]).sum().backward()
        finally:
            minidl.set_num_threads(previous)
        results.append([out[0].detach().numpy()] + [t.grad.numpy() for t in leaves if t.grad is not None])
    for serial, threaded in zip(*results, strict=True):
        np.testing.assert_allclose(threaded, serial, rtol=1e-13, atol=1e-13)
