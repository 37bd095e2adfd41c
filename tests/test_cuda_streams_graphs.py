"""Streams, events and CUDA graphs (minidl.cuda, minidl.accelerator, minidl.Stream/Event).

Results are checked against numpy and against the same work run eagerly; the API's answers and
error texts on a machine without an accelerator against torch. On a GPU these run on CuPy's
streams and graphs, elsewhere on the simulator, whose capture records launches instead of running
them as CUDA does."""
import numpy as np
import pytest

import minidl
import minidl.accelerator as acc
from minidl.kernels.cuda import runtime
from tests.cuda_support import cuda  # noqa: F401 (the fixture)

torch = pytest.importorskip("torch")


def fresh(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------------------- streams
def test_the_default_stream_is_current_until_another_is_made_current(cuda):
    default = minidl.cuda.current_stream()
    assert default == minidl.cuda.default_stream() == acc.current_stream()
    assert default.cuda_stream == default.native_handle == 0 and not default.is_capturing()
    assert default.device == minidl.device("cuda:0")
    assert isinstance(default, minidl.Stream) and isinstance(default, minidl.cuda.Stream)
    side, other = minidl.cuda.Stream(), minidl.cuda.Stream(priority=-1)
    assert side != default and side != other and side.cuda_stream != 0
    with side:
        assert minidl.cuda.current_stream() == side
        with minidl.cuda.stream(other):
            assert minidl.cuda.current_stream() == other
        with minidl.cuda.stream(None):
            assert minidl.cuda.current_stream() == side
        assert minidl.cuda.current_stream() == side
    assert minidl.cuda.current_stream() == default
    acc.set_stream(side)
    assert acc.current_stream() == side and len({side, minidl.cuda.current_stream()}) == 1
    minidl.cuda.set_stream(None)  # changes nothing, as torch
    assert minidl.cuda.current_stream() == side
    minidl.cuda.set_stream(default)
    assert minidl.cuda.current_stream() == default


def test_work_on_a_side_stream_computes_what_numpy_does(cuda):
    a, b = fresh((5, 7), 0), fresh((7, 3), 1)
    x, w = minidl.tensor(a, device="cuda"), minidl.tensor(b, device="cuda")
    side = minidl.cuda.Stream()
    side.wait_stream(minidl.cuda.current_stream())
    with side:
        y = ((x * 2 + 1) @ w).relu().sum(0)
    minidl.cuda.current_stream().wait_stream(side)
    side.synchronize()
    assert side.query()
    np.testing.assert_allclose(y.cpu().numpy(), np.maximum((a * 2 + 1) @ b, 0).sum(0), rtol=1e-5, atol=1e-5)


def test_events_order_streams_and_time_the_work_between_them(cuda):
    start, end = minidl.cuda.Event(enable_timing=True), minidl.cuda.Event(enable_timing=True)
    assert start.query() and "uninitialized" in repr(start)  # never recorded: nothing to wait for
    with pytest.raises(ValueError, match="Both events must be recorded before calculating elapsed time."):
        start.elapsed_time(end)
    x = minidl.ones(1000, device="cuda")
    start.record()
    y = (x * 3).sum()
    end.record()
    waiter = minidl.cuda.Stream()
    end.wait(waiter)
    with waiter:
        z = y + 1
    end.synchronize()
    assert start.query() and end.query() and end.cuda_event == end.event_id != 0
    assert start.elapsed_time(end) >= 0
    assert z.item() == 3001
    plain = minidl.cuda.current_stream().record_event()
    with pytest.raises(ValueError, match="Both events must be created with argument 'enable_timing=True'."):
        plain.elapsed_time(end)


def test_streams_and_events_without_an_accelerator_answer_as_torch():
    saved = runtime._sim_requested
    runtime.sim_enable(False)
    try:
        if runtime.available() or torch.accelerator.is_available():
            pytest.skip("an accelerator is here")
        ours, theirs = minidl.Stream(), torch.Stream()
        for attr in ("device_type", "device_index", "stream_id"):
            assert getattr(ours, attr) == getattr(theirs, attr), attr
        assert str(ours.device) == str(theirs.device) == "cpu"
        assert ours.query() is theirs.query() is True
        assert ours.is_capturing() is theirs.is_capturing() is False
        assert ours.synchronize() is theirs.synchronize() is None
        assert (ours == minidl.Stream()) is (theirs == torch.Stream()) is True
        with ours as entered, theirs:
            assert entered is ours
        assert minidl.Event().query() is torch.Event().query() is True
        calls = [lambda m: m.Event().record(), lambda m: m.Stream().record_event(),
                 lambda m: m.Stream().wait_stream(m.Stream()),
                 lambda m: m.Event(enable_timing=True).elapsed_time(m.Event()),
                 lambda m: m.accelerator.set_stream(m.Stream())]
        for call in calls:
            errors = []
            for module in (minidl, torch):
                with pytest.raises(Exception) as caught:
                    call(module)
                errors.append((type(caught.value), str(caught.value)))
            assert errors[0] == errors[1]
    finally:
        runtime.sim_enable(saved)


# ----------------------------------------------------------------------------- graphs
def test_a_capture_records_without_running_and_a_replay_runs_it(cuda):
    x = minidl.zeros(6, device="cuda")
    w = minidl.tensor(fresh((6, 4), 2), device="cuda")
    g = minidl.cuda.CUDAGraph()
    with minidl.cuda.graph(g):
        x += 1
        y = (x * 0.5) @ w
    assert minidl.cuda.current_stream() == minidl.cuda.default_stream()
    np.testing.assert_array_equal(x.cpu().numpy(), np.zeros(6))  # captured, not run
    for step in (1, 2, 3):
        g.replay()
        np.testing.assert_array_equal(x.cpu().numpy(), np.full(6, step))
        np.testing.assert_allclose(y.cpu().numpy(), (np.full(6, step * 0.5, np.float32) @ w.cpu().numpy()),
                                   rtol=1e-6)


def test_a_replay_reads_new_values_copied_into_its_static_input(cuda):
    static = minidl.zeros(4, 3, device="cuda")
    g = minidl.cuda.CUDAGraph()
    with minidl.cuda.graph(g):
        out = (static.exp() - 2.5).abs().sum(1)
    for seed in range(3):
        batch = fresh((4, 3), seed)
        static.copy_(minidl.tensor(batch, device="cuda"))
        g.replay()
        np.testing.assert_allclose(out.cpu().numpy(), np.abs(np.exp(batch) - 2.5).sum(1), rtol=1e-5)


def _model():
    return minidl.nn.Sequential(minidl.nn.Linear(4, 8), minidl.nn.Tanh(), minidl.nn.Linear(8, 1)).cuda()


def _step(model, opt, x, y):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss


def test_a_captured_training_step_trains_as_the_eager_one(cuda):
    """torch's whole-network recipe: warm up on a side stream, capture forward, backward and the
    optimiser step, then copy each batch into the static input and replay."""
    minidl.manual_seed(0)
    model, eager = _model(), _model()
    eager.load_state_dict(model.state_dict())
    opt = minidl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    eager_opt = minidl.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    batches = [(fresh((16, 4), 2 * i), fresh((16, 1), 2 * i + 1)) for i in range(5)]
    static_x, static_y = minidl.zeros(16, 4, device="cuda"), minidl.zeros(16, 1, device="cuda")
    warmup = minidl.cuda.Stream()
    warmup.wait_stream(minidl.cuda.current_stream())
    with minidl.cuda.stream(warmup):
        static_x.copy_(minidl.tensor(batches[0][0], device="cuda"))
        static_y.copy_(minidl.tensor(batches[0][1], device="cuda"))
        opt.zero_grad(set_to_none=True)
        _step(model, opt, static_x, static_y)
    minidl.cuda.current_stream().wait_stream(warmup)
    g = minidl.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with minidl.cuda.graph(g):
        static_loss = _step(model, opt, static_x, static_y)
    eager_losses, replayed = [], []
    for i, (x, y) in enumerate(batches):
        eager_opt.zero_grad()
        eager_losses.append(_step(eager, eager_opt, minidl.tensor(x, device="cuda"),
                                  minidl.tensor(y, device="cuda")).item())
        if i:
            static_x.copy_(minidl.tensor(x, device="cuda"))
            static_y.copy_(minidl.tensor(y, device="cuda"))
            g.replay()
            replayed.append(static_loss.item())
    np.testing.assert_allclose(replayed, eager_losses[1:], rtol=1e-6)
    for p, q in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("work", [lambda x: x.sum().item(), lambda x: x.cpu(), lambda x: minidl.cuda.synchronize(),
                                  lambda x: minidl.rand(3, device="cuda"), lambda x: x.nonzero(),
                                  lambda x: x + minidl.tensor(np.ones(6, np.float32), device="cuda")],
                         ids=["item", "cpu", "synchronize", "rand", "nonzero", "host array"])
def test_what_a_graph_cannot_hold_raises_and_leaves_no_capture_behind(cuda, work):
    x = minidl.ones(6, device="cuda")
    g = minidl.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="while a CUDA graph is being captured"):
        with minidl.cuda.graph(g):
            work(x)
    assert not runtime.capturing and not minidl.cuda.is_current_stream_capturing()
    assert minidl.cuda.current_stream() == minidl.cuda.default_stream()
    with pytest.raises(RuntimeError, match="no captured graph"):
        g.replay()  # the failed capture is not a graph
    assert (x * 2).sum().item() == 12  # the device works on


def test_graph_lifecycle_errors_reset_pool_sharing_and_debug_dump(cuda, tmp_path):
    g = minidl.cuda.CUDAGraph(keep_graph=True)
    with pytest.raises(RuntimeError, match="no captured graph"):
        g.replay()
    with pytest.raises(RuntimeError, match="cannot be captured on the default stream"):
        g.capture_begin()
    with pytest.raises(ValueError, match="capture_error_mode must be one of"):
        g.capture_begin(capture_error_mode="lenient")
    x = minidl.zeros(3, device="cuda")
    g.enable_debug_mode()
    with minidl.cuda.stream(minidl.cuda.Stream()):
        g.capture_begin()
        assert minidl.cuda.is_current_stream_capturing() and minidl.cuda.current_stream().is_capturing()
        x.add_(2)
        g.capture_end()
        assert not minidl.cuda.is_current_stream_capturing() and not minidl.cuda.current_stream().is_capturing()
    with pytest.raises(RuntimeError, match="already holds a capture"):
        g.capture_begin()
    g.instantiate()
    g.replay()
    assert x.cpu().tolist() == [2, 2, 2]
    dump = tmp_path / "graph.dot"
    g.debug_dump(str(dump))
    text = dump.read_text()
    assert text.startswith("digraph") and "binary" in text  # the add's kernel
    shared = minidl.cuda.CUDAGraph()
    with minidl.cuda.graph(shared, pool=g.pool()):
        x.mul_(10)
    assert shared.pool() == g.pool() and isinstance(g.pool(), tuple) and len(g.pool()) == 2
    g.reset()
    with minidl.cuda.graph(g, pool=minidl.cuda.graph_pool_handle()):
        x.sub_(1)
    shared.replay()
    g.replay()
    assert x.cpu().tolist() == [19, 19, 19]


def test_accelerator_graph_captures_from_the_current_stream(cuda):
    x = minidl.zeros(4, device="cuda")
    g = acc.Graph()
    assert g.capture_error_mode == "default" and g.graph_pool is None
    with pytest.raises(RuntimeError, match="cannot be captured on the default stream"):
        with g:
            pass
    with minidl.Stream(), g:
        x += 5
    assert x.cpu().tolist() == [0] * 4
    g.replay()
    g.replay()
    assert x.cpu().tolist() == [10] * 4


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"])
def test_numbers_reach_the_device_bit_for_bit(cuda, dtype):
    """Numbers of up to 8 bytes travel as kernel arguments, not host copies."""
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    values = [True, False] if dtype == "bool" else [info.min, info.max, 0, 1] if info else \
        [0.0, -0.0, np.nan, np.inf, -np.inf, 1.5, np.finfo(dtype).tiny, np.finfo(dtype).max]
    for value in values:
        host = np.array([value], dtype=dtype)
        on_device = minidl.tensor(host, device="cuda")
        np.testing.assert_array_equal(on_device.cpu().numpy().view(np.uint8), host.view(np.uint8))
    pair = np.array([-3, 7], dtype=np.int32)
    np.testing.assert_array_equal(minidl.tensor(pair, device="cuda").cpu().numpy(), pair)
