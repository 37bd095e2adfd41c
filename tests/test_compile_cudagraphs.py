"""CUDA-graph replay of compiled steps (mode="reduce-overhead", backend="cudagraphs") and the draw kernels that
read their Philox state from a device buffer, which lets a CUDA graph draw new numbers at each replay.

Checked against the same step run eagerly from the same state and seed, and the state-buffer kernels against
the argument ones. On a GPU these run on CuPy's graphs, elsewhere on the simulator, whose capture records
launches instead of running them (the tests count the graphs' launches)."""
import numpy as np
import pytest

import minidl
from minidl import kernels, nn
from minidl.compiler.cudagraphs import CudaGraphs
from minidl.nn import functional as F
from minidl.kernels.cuda import runtime
from minidl.layout import Layout
from tests.cuda_support import cuda  # noqa: F401 (the fixture)


# ----------------------------------------------------------------------------- the kernels
SEED, OFFSET, DELTA = 0x1234_5678_9ABC_DEF0, (1 << 64) - 40, 100   # (the counter wraps past 2^64)


def _state(device, seed, base):
    """A Philox state buffer (seed, base offset) on ``device``: the bits of two unsigned 64-bit numbers."""
    return kernels.lookup("from_host", device)(np.array([seed, base % (1 << 64)], np.uint64).view(np.int64))


def _draws(device, seed, offset):
    """Every draw kernel's outputs at (seed, offset) (offset may be a delta when seed is a state buffer)."""
    get = lambda name: kernels.lookup(name, device)   # noqa: E731
    put = lambda a: get("from_host")(np.ascontiguousarray(a).reshape(-1))   # noqa: E731
    rng = np.random.default_rng(0)
    outs = {}
    for kind, dtype, a, b in (("uniform", np.float32, -1.0, 2.0), ("normal", np.float64, 0.5, 3.0),
                              ("integers", np.int64, -7, 1 << 40)):
        out = put(np.zeros(37, dtype))
        get("random")(kind, out, seed, offset, a, b)
        outs[kind] = out
    x = put(rng.standard_normal(37).astype(np.float32))
    out, mask = put(np.zeros(37, np.float32)), put(np.zeros(37, np.float32))
    get("dropout")(x, out, mask, 0.3, seed, offset)
    outs["dropout"], outs["mask"] = out, mask
    B, H, L, S, E = 1, 2, 3, 5, 4
    q, k, v, g = (put(rng.standard_normal(n).astype(np.float64)) for n in (B * H * L * E, B * H * S * E,
                                                                               B * H * S * E, B * H * L * E))
    ql, kl = Layout((B, H, L, E)), Layout((B, H, S, E))
    att, lse = put(np.zeros(B * H * L * E)), put(np.zeros(B * H * L))
    get("attention")(q, ql, k, kl, v, kl, None, None, att, lse, 0.5, False, 0.4, seed, offset)
    dq, dk, dv = put(np.zeros(B * H * L * E)), put(np.zeros(B * H * S * E)), put(np.zeros(B * H * S * E))
    get("attention_backward")(q, ql, k, kl, v, kl, None, None, att, lse, g, dq, dk, dv, 0.5, False, 0.4, seed,
                              offset)
    outs.update(attention=att, lse=lse, dq=dq, dk=dk, dv=dv)
    return {name: np.array(get("to_host")(buf)) for name, buf in outs.items()}


def _device_state_draws_equal_argument_draws(device):
    plain = _draws(device, SEED, OFFSET)
    from_state = _draws(device, _state(device, SEED, OFFSET - DELTA), DELTA)
    other = _draws(device, SEED, OFFSET + 1)
    for name in plain:
        np.testing.assert_array_equal(from_state[name], plain[name], err_msg=name)
    assert not np.array_equal(other["uniform"], plain["uniform"])   # (the offset reaches the kernels)
    return plain


def test_draws_from_a_state_buffer_equal_draws_from_arguments_on_the_cpu_and_on_cuda(cuda):
    on_cpu = _device_state_draws_equal_argument_draws("cpu")
    on_cuda = _device_state_draws_equal_argument_draws("cuda")
    for name in ("uniform", "integers", "dropout", "mask"):   # (the contract: the same bits on both devices)
        np.testing.assert_array_equal(on_cuda[name], on_cpu[name], err_msg=name)


def test_a_state_buffer_of_another_kind_is_refused():
    out = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="Philox state buffer of two int64"):
        kernels.lookup("random", "cpu")("uniform", out, np.zeros(3, np.int64), 0, 0.0, 1.0)


# ----------------------------------------------------------------------------- compiled steps
def _graph(compiled):
    """The one Graph of a compiled function (its replays went through it: nothing ran eagerly)."""
    found = compiled._minidl_compiled
    assert not found.eager and sum(len(g) for g in found.graphs.values()) == 1
    return next(iter(found.graphs.values()))[0]


def _same_as_eager(f, g, x, seed, calls):
    """``calls`` outputs of the compiled ``g`` from ``manual_seed(seed)``, checked equal to the eager ``f``'s
    from the same seed; and the CUDA generator's state after the eager calls (None on the CPU)."""
    on_cuda = x.device.type == "cuda"
    runs = []
    for run in (f, g):
        minidl.manual_seed(seed)
        runs.append([run(x).cpu().numpy() for _ in range(calls)])
        if run is f:
            state = minidl.cuda.get_rng_state().numpy() if on_cuda else None
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    return runs[1], state


def _launches(monkeypatch):
    """Counts of CUDA-graph replays and of the kernels launched one by one (a graph's replay launches its own
    work without them), from now on."""
    counts = {"graphs": 0, "kernels": 0}
    replay, enqueue = minidl.cuda.CUDAGraph.replay, runtime.enqueue

    def count_replay(self):
        counts["graphs"] += 1
        return replay(self)

    def count_enqueue(*args, **kwargs):
        counts["kernels"] += 1
        return enqueue(*args, **kwargs)
    monkeypatch.setattr(minidl.cuda.CUDAGraph, "replay", count_replay)
    monkeypatch.setattr(runtime, "enqueue", count_enqueue)
    return counts


def _same(a, b):
    np.testing.assert_array_equal(a.detach().cpu().numpy(), b.detach().cpu().numpy())


def _trainers(make, **compile_kw):
    """(model, step) twice from the same seed: the step eager, then compiled with ``compile_kw``."""
    out = []
    for compiled in (False, True):
        minidl.manual_seed(1)
        model = make().to("cuda")
        opt = minidl.optim.Adam(model.parameters(), lr=1e-2)

        def step(x, y, model=model, opt=opt):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        out.append((model, minidl.compile(step, **compile_kw) if compiled else step))
    return out


def _batch(i):
    rng = np.random.default_rng(i)
    x = minidl.tensor(rng.standard_normal((6, 8)).astype(np.float32), device="cuda")
    return x, minidl.tensor(rng.integers(0, 4, 6), device="cuda")


def _train(make, steps=4, **compile_kw):
    """Eager and compiled steps from the same seeds: the same losses, parameters and generator state."""
    (m_e, eager), (m_c, comp) = _trainers(make, **compile_kw)
    for run in (eager, comp):
        minidl.manual_seed(11)
        losses = [run(*_batch(i)) for i in range(steps)]
        if run is eager:
            ref, state = losses, minidl.cuda.get_rng_state()
    for a, b in zip(ref, losses):
        _same(a, b)
    for p_e, p_c in zip(m_e.parameters(), m_c.parameters()):
        _same(p_e, p_c)
    np.testing.assert_array_equal(state.numpy(), minidl.cuda.get_rng_state().numpy())
    return comp


def _mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def test_a_reduce_overhead_training_step_equals_the_eager_one_and_replays_cuda_graphs(cuda, monkeypatch):
    counts = _launches(monkeypatch)
    comp = _train(_mlp, mode="reduce-overhead")
    made = _graph(comp).cuda_graphs
    assert isinstance(made, CudaGraphs) and made.graphs and not made.plain
    assert counts["graphs"] == made.launches == 3 * len(made.graphs)   # (steps 2 to 4 are replays)
    # a plain replay of the same step launches more kernels one by one: the graphs hold the rest
    step = _trainers(_mlp)[1][1]
    x, y = _batch(0)
    step(x, y)
    before = dict(counts)
    step(x, y)
    plain_kernels = counts["kernels"] - before["kernels"]
    before = dict(counts)
    comp(x, y)
    assert counts["graphs"] - before["graphs"] == len(made.graphs)
    assert counts["kernels"] - before["kernels"] < plain_kernels


def test_dropout_draws_new_masks_at_each_graph_replay_as_the_eager_steps_do(cuda, monkeypatch):
    """Dropout in a CUDA graph: each replay draws a new mask, the eager step's from the same seed, and the
    generator ends where eager's does."""
    counts = _launches(monkeypatch)

    def f(x):
        return F.dropout(x, 0.5, training=True) * 2

    g = minidl.compile(f, mode="reduce-overhead")
    x = minidl.ones(64, device="cuda")
    outs, state = _same_as_eager(f, g, x, seed=7, calls=5)
    assert len({o.tobytes() for o in outs}) == 5
    np.testing.assert_array_equal(state, minidl.cuda.get_rng_state().numpy())
    made = _graph(g).cuda_graphs
    assert len(made.graphs) == 1 and counts["graphs"] == made.launches == 4


def _dropout_mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4))


class _Attention(nn.Module):
    """Self-attention with dropout on its weights: the attention kernels draw in the forward and again, the same
    elements, in the backward."""

    def __init__(self):
        super().__init__()
        self.inp, self.out = nn.Linear(8, 24), nn.Linear(8, 4)

    def forward(self, x):
        q, k, v = (t.reshape(1, 6, 2, 4).transpose(1, 2) for t in self.inp(x).chunk(3, dim=-1))
        return self.out(F.scaled_dot_product_attention(q, k, v, dropout_p=0.4).transpose(1, 2).reshape(6, 8))


@pytest.mark.parametrize("make", [_dropout_mlp, _Attention], ids=["dropout", "attention"])
def test_a_training_step_with_dropout_replays_as_the_eager_steps_run(cuda, make):
    comp = _train(make, steps=5, backend="cudagraphs")
    made = _graph(comp).cuda_graphs
    assert made.graphs and made.launches == 4 * len(made.graphs) and not made.plain
    draws = _graph(comp).draws
    assert draws and all(isinstance(entry[0], list) for entry in draws)   # (each draw reads a state buffer)


def test_on_the_cpu_reduce_overhead_replays_plainly():
    def f(x):
        return F.dropout(x, 0.5, training=True) + 1

    g = minidl.compile(f, mode="reduce-overhead")
    x = minidl.ones(32)
    _same_as_eager(f, g, x, seed=3, calls=3)
    graph = _graph(g)
    assert graph.cuda_graphs is None and "cuda_graph" not in graph.kinds


def test_a_value_read_on_the_host_splits_the_step_into_graphs_that_draw_as_eager_does(cuda):
    """Two runs around a read, both drawing from one generator (one state buffer, two deltas)."""
    def f(x):
        y = F.dropout(x, 0.5, training=True)
        if x.sum().item() > 0:   # (a read: checked at each replay, between the two graphs)
            y = y + 1
        return F.dropout(y, 0.25, training=True)

    g = minidl.compile(f, mode="reduce-overhead")
    x = minidl.ones(48, device="cuda")
    _, state = _same_as_eager(f, g, x, seed=5, calls=4)
    np.testing.assert_array_equal(state, minidl.cuda.get_rng_state().numpy())
    graph = _graph(g)
    assert len(graph.cuda_graphs.graphs) == 2 and len(graph.draws) == 1
    assert graph.kinds[0] == graph.kinds[-1] == "cuda_graph" and set(graph.kinds[1:-1]) == {"read"}


def test_a_run_whose_capture_fails_replays_plainly(cuda, monkeypatch):
    """A kernel that refuses capture (as one needing the host does) leaves its run plain, drawing from arguments."""
    dropout = kernels.lookup("dropout", "cuda")

    def refusing(x, out, mask, p, seed, offset):
        runtime.refuse_during_capture("this test's dropout")
        dropout(x, out, mask, p, seed, offset)
    monkeypatch.setitem(kernels._registry, ("cuda", "dropout"), refusing)

    def f(x):
        return F.dropout(x * 3, 0.5, training=True)

    g = minidl.compile(f, mode="reduce-overhead")
    x = minidl.ones(40, device="cuda")
    _same_as_eager(f, g, x, seed=9, calls=3)
    made = _graph(g).cuda_graphs
    assert not made.graphs and "this test's dropout" in made.plain[0]


def test_fused_kernels_are_captured_in_the_cuda_graphs_and_replay_as_eager(cuda):
    """A fused elementwise chain and a fused reduction are launches like any other: inside the graph."""
    def step(x, b):
        return (F.gelu(x + b) * 2 - x).sum(-1).exp()
    compiled = minidl.compile(step, mode="reduce-overhead")
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = minidl.tensor(rng.standard_normal((4, 6, 8)), device="cuda")
        b = minidl.tensor(rng.standard_normal(8), device="cuda")
        np.testing.assert_allclose(compiled(x, b).cpu().numpy(), step(x, b).cpu().numpy(), rtol=1e-12)
    (graph,) = compiled._minidl_compiled.graphs.values()
    graph = graph[0]
    assert [str(p) for p in graph.programs] == ["fused(add, gelu, mul, sub, sum, exp)"]
    assert "cuda_graph" in graph.kinds and "fused" not in graph.kinds
