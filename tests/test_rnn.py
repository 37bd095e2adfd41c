"""Recurrent layers and cells against three oracles: PyTorch (weights copied by state_dict name, forward
and every gradient, float64), a numpy loop written from the equations, and finite differences."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from test_gradcheck import gradcheck

import minidl
from minidl import nn

TOL = 1e-6


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def _np(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def _as_list(result):
    """(output, h_n) / (output, (h_n, c_n)) / h / (h, c) as a flat list of tensors."""
    if not isinstance(result, tuple):
        return [result]
    return [t for r in result for t in (r if isinstance(r, tuple) else (r,))]


def _state_arg(states):
    return None if not states else states[0] if len(states) == 1 else tuple(states)


# -- PyTorch ---------------------------------------------------------------------------------------
def _match_torch(torch, mine, theirs, arrays, rng):
    """Copy theirs' weights by name, run both on arrays = (input, *states): outputs, shapes, and the gradients
    of the input, the states and every parameter (under random cotangents of every output) must agree."""
    assert list(mine.state_dict()) == list(theirs.state_dict())
    mine.load_state_dict({k: minidl.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    m_in = [minidl.tensor(a, requires_grad=True) for a in arrays]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    m_out = _as_list(mine(m_in[0], _state_arg(m_in[1:])))
    t_out = _as_list(theirs(t_in[0], _state_arg(t_in[1:])))
    assert [tuple(m.shape) for m in m_out] == [tuple(t.shape) for t in t_out]
    cotangents = [rng.standard_normal(tuple(t.shape)) for t in t_out]
    sum((m * minidl.tensor(u)).sum() for m, u in zip(m_out, cotangents)).backward()
    sum((t * torch.tensor(u)).sum() for t, u in zip(t_out, cotangents)).backward()
    for m, t in zip(m_out, t_out):
        np.testing.assert_allclose(_np(m), t.detach().numpy(), rtol=TOL, atol=TOL)
    for m, t in zip(m_in, t_in):
        np.testing.assert_allclose(_np(m.grad), t.grad.numpy(), rtol=TOL, atol=TOL)
    t_params = dict(theirs.named_parameters())
    assert [n for n, _ in mine.named_parameters()] == list(t_params)
    for name, p in mine.named_parameters():
        np.testing.assert_allclose(_np(p.grad), t_params[name].grad.numpy(), rtol=TOL, atol=TOL, err_msg=name)


LAYER_CASES = [
    ("RNN", {}, (5, 3), 1),
    ("RNN", {"nonlinearity": "relu", "num_layers": 2, "bidirectional": True, "bias": False}, (4, 2), 0),
    ("RNN", {"bidirectional": True}, (4,), 1),                                     # unbatched
    ("LSTM", {"batch_first": True, "num_layers": 2, "bidirectional": True}, (3, 4), 2),
    ("LSTM", {"num_layers": 2, "bidirectional": True, "proj_size": 3}, (4, 2), 2),
    ("LSTM", {"proj_size": 2}, (4,), 0),
    ("LSTM", {}, (5,), 2),
    ("GRU", {"batch_first": True, "bidirectional": True}, (2, 5), 1),
    ("GRU", {"num_layers": 2, "dropout": 0.5}, (4, 3), 1),                        # eval: no dropout
    ("GRU", {"bias": False}, (3,), 0),
]


@pytest.mark.parametrize("cls, kwargs, lead, n_states", LAYER_CASES)
def test_layer_forward_and_all_gradients_match_torch(torch, cls, kwargs, lead, n_states):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    theirs = getattr(torch.nn, cls)(3, 4, **kwargs).double().eval()
    mine = getattr(nn, cls)(3, 4, **kwargs).double().eval()
    batch = () if len(lead) == 1 else (lead[0] if kwargs.get("batch_first") else lead[1],)
    layers = (2 if kwargs.get("bidirectional") else 1) * kwargs.get("num_layers", 1)
    state_sizes = [kwargs.get("proj_size") or 4, 4][:n_states]
    arrays = [rng.standard_normal(lead + (3,))] + [rng.standard_normal((layers,) + batch + (s,)) for s in state_sizes]
    _match_torch(torch, mine, theirs, arrays, rng)


CELL_CASES = [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu", "bias": False}), ("LSTMCell", {}),
              ("LSTMCell", {"bias": False}), ("GRUCell", {})]


@pytest.mark.parametrize("cls, kwargs", CELL_CASES)
@pytest.mark.parametrize("batch, with_state", [((2,), True), ((), True), ((3,), False)])
def test_cell_forward_and_all_gradients_match_torch(torch, cls, kwargs, batch, with_state):
    rng = np.random.default_rng(1)
    torch.manual_seed(1)
    theirs = getattr(torch.nn, cls)(3, 4, **kwargs).double()
    mine = getattr(nn, cls)(3, 4, **kwargs).double()
    n_states = (2 if cls == "LSTMCell" else 1) if with_state else 0
    arrays = [rng.standard_normal(batch + (3,))] + [rng.standard_normal(batch + (4,)) for _ in range(n_states)]
    _match_torch(torch, mine, theirs, arrays, rng)


@pytest.mark.parametrize("cls, args, kwargs", [
    ("LSTM", (10, 20), {"num_layers": 2, "batch_first": True}),
    ("LSTM", (3, 4), {"proj_size": 2, "num_layers": 3, "bidirectional": True, "bias": False}),
    ("GRU", (3, 4), {"num_layers": 2, "dropout": 0.25}),
    ("RNN", (3, 4), {"bidirectional": True}),
    ("RNNCell", (3, 4), {"nonlinearity": "relu", "bias": False}),
    ("LSTMCell", (3, 4), {}),
    ("GRUCell", (3, 4), {"bias": False}),
])
def test_state_dict_names_shapes_and_repr_match_torch(torch, cls, args, kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mine, theirs = getattr(nn, cls)(*args, **kwargs), getattr(torch.nn, cls)(*args, **kwargs)
    assert [(k, tuple(v.shape)) for k, v in mine.state_dict().items()] == \
           [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    assert repr(mine) == repr(theirs)
    if not cls.endswith("Cell"):
        assert [[tuple(w.shape) for w in ws] for ws in mine.all_weights] == \
               [[tuple(w.shape) for w in ws] for ws in theirs.all_weights]


def test_reprs():
    assert repr(nn.LSTM(10, 20, num_layers=2, batch_first=True)) == "LSTM(10, 20, num_layers=2, batch_first=True)"
    assert repr(nn.GRU(3, 4, bidirectional=True)) == "GRU(3, 4, bidirectional=True)"
    # PyTorch's RNN hides a relu nonlinearity; ours shows it, as PyTorch's RNNCell does
    assert repr(nn.RNN(3, 4, nonlinearity="relu")) == "RNN(3, 4, nonlinearity=relu)"
    assert repr(nn.RNNCell(3, 4, nonlinearity="relu")) == "RNNCell(3, 4, nonlinearity=relu)"


def test_default_init_is_uniform_within_one_over_sqrt_hidden():
    hidden = 25
    model = nn.LSTM(7, hidden, num_layers=2, bidirectional=True, proj_size=5)
    values = np.concatenate([_np(p).ravel() for p in model.parameters()])
    bound = 1 / np.sqrt(hidden)
    assert np.all(np.abs(values) <= bound)
    # U(-b, b): mean 0, standard deviation b/sqrt(3), with ~30000 draws
    assert abs(values.mean()) < 0.02 * bound and abs(values.std() - bound / np.sqrt(3)) < 0.02 * bound
    assert all(_np(p).std() > 0 for p in model.parameters())


# -- numpy oracle ----------------------------------------------------------------------------------
def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def np_step(mode, x, state, p, suffix=""):
    """One step from the equations, p: name -> array (biases may be absent)."""
    w_ih, w_hh = p["weight_ih" + suffix], p["weight_hh" + suffix]
    b_ih, b_hh = p.get("bias_ih" + suffix, 0.0), p.get("bias_hh" + suffix, 0.0)
    h = state[0]
    gi, gh = x @ w_ih.T + b_ih, h @ w_hh.T + b_hh
    if mode == "RNN_TANH":
        return (np.tanh(gi + gh),)
    if mode == "RNN_RELU":
        return (np.maximum(gi + gh, 0.0),)
    H = w_hh.shape[1]
    if mode == "GRU":
        r = _sigmoid(gi[..., :H] + gh[..., :H])
        z = _sigmoid(gi[..., H:2 * H] + gh[..., H:2 * H])
        n = np.tanh(gi[..., 2 * H:] + r * gh[..., 2 * H:])
        return ((1 - z) * n + z * h,)
    H = w_hh.shape[0] // 4
    gates = gi + gh
    i, f = _sigmoid(gates[..., :H]), _sigmoid(gates[..., H:2 * H])
    g, o = np.tanh(gates[..., 2 * H:3 * H]), _sigmoid(gates[..., 3 * H:])
    c = f * state[1] + i * g
    return (o * np.tanh(c), c)


def np_layers(mode, x, states, p, num_layers, directions):
    """Seq-first multi-layer (bidirectional) forward: output, final states stacked over layer*direction."""
    finals = []
    for layer in range(num_layers):
        outs = []
        for d in range(directions):
            k = layer * directions + d
            suffix = f"_l{layer}" + ("_reverse" if d else "")
            state, ys = tuple(s[k] for s in states), [None] * len(x)
            for t in (range(len(x) - 1, -1, -1) if d else range(len(x))):
                state = np_step(mode, x[t], state, p, suffix)
                ys[t] = state[0]
            outs.append(np.stack(ys))
            finals.append(state)
        x = np.concatenate(outs, -1)
    return x, [np.stack(s) for s in zip(*finals)]


MODES = [("RNN", {}, "RNN_TANH"), ("RNN", {"nonlinearity": "relu"}, "RNN_RELU"), ("LSTM", {}, "LSTM"),
         ("GRU", {}, "GRU")]


@pytest.mark.parametrize("cls, kwargs, mode", MODES)
def test_cell_step_matches_numpy(cls, kwargs, mode, rng):
    cell = getattr(nn, cls + "Cell")(3, 5, **kwargs).double()
    p = {k: _np(v) for k, v in cell.state_dict().items()}
    x = rng.standard_normal((2, 3))
    states = [rng.standard_normal((2, 5)) for _ in range(2 if mode == "LSTM" else 1)]
    got = _as_list(cell(minidl.tensor(x), _state_arg([minidl.tensor(s) for s in states])))
    for g, e in zip(got, np_step(mode, x, states, p), strict=True):
        np.testing.assert_allclose(_np(g), e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls, kwargs, mode", MODES)
@pytest.mark.parametrize("batch_first", [False, True])
def test_two_layer_bidirectional_forward_matches_numpy(cls, kwargs, mode, batch_first, rng):
    model = getattr(nn, cls)(3, 4, num_layers=2, bidirectional=True, batch_first=batch_first, **kwargs).double()
    p = {k: _np(v) for k, v in model.state_dict().items()}
    x = rng.standard_normal((5, 2, 3))                      # (L, N, in)
    states = [rng.standard_normal((4, 2, 4)) for _ in range(2 if mode == "LSTM" else 1)]
    out_e, finals_e = np_layers(mode, x, states, p, 2, 2)
    x_in = x.transpose(1, 0, 2) if batch_first else x
    out, *finals = _as_list(model(minidl.tensor(x_in), _state_arg([minidl.tensor(s) for s in states])))
    np.testing.assert_allclose(_np(out), out_e.transpose(1, 0, 2) if batch_first else out_e, rtol=1e-12, atol=1e-12)
    for g, e in zip(finals, finals_e, strict=True):
        np.testing.assert_allclose(_np(g), e, rtol=1e-12, atol=1e-12)
    # unbatched: the same sequence without the batch dimension, states likewise
    out1, *finals1 = _as_list(model(minidl.tensor(x[:, 1]), _state_arg([minidl.tensor(s[:, 1]) for s in states])))
    np.testing.assert_allclose(_np(out1), out_e[:, 1], rtol=1e-12, atol=1e-12)
    for g, e in zip(finals1, finals_e, strict=True):
        np.testing.assert_allclose(_np(g), e[:, 1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls, kwargs, mode", MODES)
def test_missing_initial_state_means_zeros(cls, kwargs, mode, rng):
    model = getattr(nn, cls)(3, 4, **kwargs).double()
    x = minidl.tensor(rng.standard_normal((3, 2, 3)))
    zeros = [minidl.zeros(1, 2, 4, dtype=minidl.float64) for _ in range(2 if mode == "LSTM" else 1)]
    for g, e in zip(_as_list(model(x)), _as_list(model(x, _state_arg(zeros))), strict=True):
        np.testing.assert_array_equal(_np(g), _np(e))


# -- finite differences ----------------------------------------------------------------------------
@pytest.mark.parametrize("cls, kwargs, mode", MODES)
def test_gradients_match_finite_differences(cls, kwargs, mode):
    """Input, initial states and all parameters (packed in one vector) of a 2-layer bidirectional stack."""
    model = getattr(nn, cls)(2, 2, num_layers=2, bidirectional=True, **kwargs).double()
    named = list(model.named_parameters())
    flat = np.concatenate([_np(p).ravel() for _, p in named])
    rng = np.random.default_rng(3)
    n_states = 2 if mode == "LSTM" else 1

    def run(x, *rest):
        states, packed = rest[:n_states], rest[n_states]
        offset = 0
        for name, p in named:   # the packed vector stands in for the parameters
            model._parameters[name] = packed[offset:offset + p.numel()].reshape(tuple(p.shape))
            offset += p.numel()
        return _as_list(model(x, _state_arg(states)))

    inputs = [rng.standard_normal((2, 1, 2))] + [rng.standard_normal((4, 1, 2)) for _ in range(n_states)] + [flat]
    gradcheck(run, inputs)


# -- dropout between layers ------------------------------------------------------------------------
def _identity_relu_stack(p, hidden=20):
    """Two relu layers that pass a positive input through unchanged: what comes out is the dropout mask."""
    model = nn.RNN(hidden, hidden, num_layers=2, nonlinearity="relu", dropout=p).double()
    with minidl.no_grad():
        for name, w in model.named_parameters():
            w.copy_(minidl.eye(hidden, dtype=minidl.float64) if name.startswith("weight_ih") else w * 0)
    return model


def test_dropout_acts_between_layers_only_in_training():
    p, hidden = 0.3, 20
    model = _identity_relu_stack(p, hidden)
    x = minidl.ones(20, 10, hidden, dtype=minidl.float64)
    minidl.manual_seed(0)
    out, h_n = model(x)
    values = _np(out)
    # kept elements scaled by 1/(1-p); dropped ones zero; nothing applied after the last layer
    assert set(np.unique(values.round(12))) == {0.0, round(1 / (1 - p), 12)}
    assert abs((values == 0).mean() - p) < 0.05                   # 4000 draws: std ~0.007
    np.testing.assert_array_equal(_np(h_n[0]), np.ones((10, hidden)))   # first layer's state is not dropped
    np.testing.assert_array_equal(_np(h_n[1]), values[-1])
    model.eval()
    np.testing.assert_array_equal(_np(model(x)[0]), np.ones((20, 10, hidden)))


def test_dropout_is_seeded():
    model = nn.LSTM(3, 4, num_layers=3, dropout=0.5)
    x = minidl.randn(6, 2, 3)
    outs = []
    for seed in (5, 5, 6):
        minidl.manual_seed(seed)
        outs.append(_np(model(x)[0]))
    np.testing.assert_array_equal(outs[0], outs[1])
    assert not np.array_equal(outs[0], outs[2])


def test_dropout_with_one_layer_warns():
    with pytest.warns(UserWarning, match="num_layers=1"):
        nn.GRU(3, 4, dropout=0.2)


# -- errors ----------------------------------------------------------------------------------------
def test_bad_input_and_state_shapes_name_the_layer_and_shapes():
    lstm, gru = nn.LSTM(3, 4, num_layers=2), nn.GRU(3, 4, batch_first=True)
    x = minidl.randn(5, 2, 3)
    with pytest.raises(RuntimeError, match=re.escape("LSTM: input of shape [5, 2, 7] has 7 features, "
                                                     "expected input_size=3")):
        lstm(minidl.randn(5, 2, 7))
    with pytest.raises(ValueError, match=re.escape("GRU: expected a 2-D (unbatched) or 3-D (batched) input, "
                                                   "got shape [1, 5, 2, 3]")):
        gru(minidl.randn(1, 5, 2, 3))
    with pytest.raises(RuntimeError, match=re.escape("expected h0 of shape [2, 2, 4] and dtype minidl.float32, "
                                                     "got [1, 2, 4]")):
        lstm(x, (minidl.zeros(1, 2, 4), minidl.zeros(2, 2, 4)))
    with pytest.raises(RuntimeError, match=re.escape("expected c0 of shape [2, 2, 4]")):
        lstm(x, (minidl.zeros(2, 2, 4), minidl.zeros(2, 3, 4)))
    with pytest.raises(RuntimeError, match=re.escape("GRU: for input of shape [5, 2, 3] expected h0 of shape "
                                                     "[1, 5, 4]")):
        gru(x, minidl.zeros(1, 2, 4))                            # batch_first: the batch is 5
    with pytest.raises(RuntimeError, match=re.escape("expected h0 of shape [1, 4]")):
        gru(minidl.randn(6, 3), minidl.zeros(1, 1, 4))            # unbatched input, batched state
    with pytest.raises(TypeError, match="LSTM: expected the state as a tuple"):
        lstm(x, minidl.zeros(2, 2, 4))
    with pytest.raises(RuntimeError, match="LSTM: input dtype minidl.float64 doesn't match"):
        lstm(x.double())
    with pytest.raises(RuntimeError, match="sequence of at least one step"):
        lstm(minidl.randn(0, 2, 3))


def test_bad_cell_input_and_state():
    cell = nn.LSTMCell(3, 4)
    with pytest.raises(ValueError, match=re.escape("LSTMCell: expected a 1-D (unbatched) or 2-D (batched) input, "
                                                   "got shape [2, 2, 3]")):
        cell(minidl.randn(2, 2, 3))
    with pytest.raises(RuntimeError, match=re.escape("LSTMCell: input of shape [2, 5] has 5 features")):
        cell(minidl.randn(2, 5))
    with pytest.raises(RuntimeError, match=re.escape("expected cx of shape [2, 4]")):
        cell(minidl.randn(2, 3), (minidl.zeros(2, 4), minidl.zeros(3, 4)))
    with pytest.raises(RuntimeError, match=re.escape("GRUCell: for input of shape [3] expected hx of shape [4]")):
        nn.GRUCell(3, 4)(minidl.randn(3), minidl.zeros(1, 4))


@pytest.mark.parametrize("make, message", [
    (lambda: nn.RNN(3, 4, nonlinearity="gelu"), "RNN: unknown nonlinearity 'gelu'"),
    (lambda: nn.RNNCell(3, 4, nonlinearity="gelu"), "RNNCell: unknown nonlinearity 'gelu'"),
    (lambda: nn.GRU(3, 4, num_layers=2, dropout=1.5), "GRU: dropout must be a probability"),
    (lambda: nn.LSTM(3, 0), "LSTM: hidden_size must be a positive integer"),
    (lambda: nn.LSTM(3, 4, num_layers=0), "LSTM: num_layers must be a positive integer"),
    (lambda: nn.LSTM(3, 4, proj_size=4), "LSTM: proj_size must be an integer in"),
    (lambda: nn.RNNBase("GRU", 3, 4, proj_size=2), "RNNBase: proj_size is only supported by LSTM"),
    (lambda: nn.GRUCell(3, -1), "GRUCell: hidden_size must be a positive integer"),
])
def test_bad_constructor_arguments(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()
