"""The CUDA gate kernels (csrc/rnn.cu, behind nn.LSTM/GRU/RNN and their cells on 'cuda') against PyTorch in
float64, forward and every gradient, and against the CPU kernels buffer by buffer, on the simulator where there
is no GPU (cuda_support.py)."""
from __future__ import annotations

import numpy as np
import pytest
from cuda_support import both, cuda_device, host
from test_rnn_fused import NAMES, _arrays
from test_sdpa_fused import count_calls

import minidl
from minidl import kernels, nn

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module", autouse=True)
def cuda():
    return cuda_device()


@pytest.mark.parametrize("cls, kwargs", [
    ("LSTM", {"num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("GRU", {"num_layers": 2, "bidirectional": True}),
    ("RNN", {"nonlinearity": "relu", "bidirectional": True}),
    ("RNN", {"num_layers": 2, "bias": False}),
])
def test_cuda_layers_match_torch_in_float64(monkeypatch, cls, kwargs):
    calls = count_calls(monkeypatch, "cuda", NAMES)
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    theirs = getattr(torch.nn, cls)(5, 7, **kwargs).double()
    mine = getattr(nn, cls)(5, 7, **kwargs).double()
    mine.load_state_dict({k: minidl.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    mine.to("cuda")
    arrays = _arrays(cls, kwargs, rng)
    m_in = [minidl.tensor(a, device="cuda", requires_grad=True) for a in arrays]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    state = (lambda s: s[0] if len(s) == 1 else tuple(s))
    m_out, m_last = mine(m_in[0], state(m_in[1:]))
    t_out, t_last = theirs(t_in[0], state(t_in[1:]))
    m_outs = [m_out] + (list(m_last) if cls == "LSTM" else [m_last])
    t_outs = [t_out] + (list(t_last) if cls == "LSTM" else [t_last])
    cotangents = [rng.standard_normal(tuple(t.shape)) for t in t_outs]
    sum((m * minidl.tensor(u, device="cuda")).sum() for m, u in zip(m_outs, cotangents)).backward()
    sum((t * torch.tensor(u)).sum() for t, u in zip(t_outs, cotangents)).backward()
    for m, t in zip(m_outs, t_outs):
        np.testing.assert_allclose(m.detach().cpu().numpy(), t.detach().numpy(), rtol=1e-12, atol=1e-12)
    for m, t in zip(m_in, t_in):
        np.testing.assert_allclose(m.grad.cpu().numpy(), t.grad.numpy(), rtol=1e-11, atol=1e-11)
    for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.cpu().numpy(), q.grad.numpy(), rtol=1e-11, atol=1e-11, err_msg=name)
    steps = 6 * kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    assert calls == {"rnn_cell": steps, "rnn_cell_backward": steps}


@pytest.mark.parametrize("mode", ["RNN_TANH", "RNN_RELU", "LSTM", "GRU"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_gate_kernels_equal_the_cpu_ones(mode, dtype):
    """Every buffer each kernel writes, from the same inputs on both devices (absent ones None on both)."""
    rng = np.random.default_rng(3)
    B, H = 3, 5
    G = {"LSTM": 4, "GRU": 3}.get(mode, 1)
    lstm, gru = mode == "LSTM", mode == "GRU"

    def make(n, used=True):
        return both(rng.standard_normal(n).astype(dtype)) if used else (None, None)

    gx, gh, bh, hx, cx = make(B * G * H), make(B * G * H), make(G * H), make(B * H), make(B * H)
    hy, cy, saved = make(B * H), make(B * H, lstm), make(B * 4 * H, lstm or gru)
    dh, dy, dc = make(B * H), make(B * H), make(B * H, lstm)
    dgx, dgh, dhx, dcx = make(B * G * H), make(B * G * H, gru), make(B * H, gru), make(B * H, lstm)
    for d, device in enumerate(("cpu", "cuda")):
        kernels.get("rnn_cell", device)(mode, gx[d], gh[d], bh[d], hx[d], cx[d], hy[d], cy[d], saved[d], H)
        kernels.get("rnn_cell_backward", device)(mode, dh[d], dy[d], dc[d], hx[d], cx[d], hy[d], cy[d], saved[d],
                                                 dgx[d], dgh[d], dhx[d], dcx[d], H)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    for pair in (hy, cy, saved, dgx, dgh, dhx, dcx):
        if pair[0] is not None:
            np.testing.assert_allclose(host(pair[1]), pair[0], rtol=tol, atol=tol)
