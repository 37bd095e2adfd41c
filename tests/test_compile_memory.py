"""The memory plan of minidl.compile (compiler/memory.py): a graph's intermediates share slabs, and the results
stay those of the eager call bit for bit.

First the plan alone, on hand-made step lists over numpy buffers and tiny kernels: the oracle is the same
steps run before the plan (the buffers each step sees, and what the steps compute). Then whole training steps,
compiled and eager from the same state, in float64: equal bit for bit at every step, with memory saved; and
the capture's own reuse of spent buffers (traced with tracemalloc, and against buffers a view still shows).
"""
import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.compiler import graph as graph_module
from minidl.compiler.memory import share_memory
from minidl.nn import functional as F

from cuda_support import cuda_device


# ------------------------------------------------------------------------------------ the plan on hand-made steps
def fill(value, out):
    out[:] = value


def add(a, b, out):
    out[:] = a + b


def scale(x, factor, out):
    out[:] = x * factor


def total(xs, out):
    out[:] = sum(x.sum() for x in xs)


def bump(xs):   # (a multi-tensor kernel: every buffer of the list written in place)
    for x in xs:
        x += 1


WRITES = {fill: (1,), add: (2,), scale: (2,), total: (1,), bump: (0,)}


def program(*calls):
    """(steps, writes) of ``calls`` ((kernel, args) pairs), as a recorder keeps them."""
    steps = [(fn, list(args)) for fn, args in calls]
    return steps, [WRITES[fn] for fn, _ in steps]


def run(steps):
    for fn, args in steps:
        fn(*args)


def plan(steps, writes, made):
    """The plan over ``steps`` with the buffers of ``made`` (a list, emptied) as the capture's own."""
    candidates = {id(b if b.base is None else b.base) for b in made}
    made.clear()
    return share_memory(steps, writes, candidates)


def arg(steps, i, j):
    return steps[i][1][j]


def test_disjoint_lifetimes_share_and_overlapping_do_not():
    """t1 (steps 0-1) and t3 (steps 2-3) take one slab; t2 (steps 1-2) overlaps both and keeps its own."""
    x, out = np.arange(6.0), np.empty(6)
    made = [np.empty(6) for _ in range(3)]
    steps, writes = program((scale, (x, 2.0, made[0])), (add, (made[0], x, made[1])), (scale, (made[1], 3.0, made[2])),
                            (add, (made[2], x, out)))
    saved, held = plan(steps, writes, made)
    assert saved == 6 * 8 and held == 2 * 6 * 8
    t1, t2, t3 = arg(steps, 0, 2), arg(steps, 1, 2), arg(steps, 2, 2)
    assert np.shares_memory(t1, t3) and not np.shares_memory(t1, t2) and not np.shares_memory(t2, t3)
    assert arg(steps, 1, 0) is t1 and arg(steps, 2, 0) is t2 and arg(steps, 3, 0) is t3
    for _ in range(2):
        out[:] = 0
        run(steps)
        np.testing.assert_array_equal(out, (x * 2 + x) * 3 + x)


def test_buffers_referred_to_elsewhere_are_pinned():
    """A buffer something else holds (an output, a gradient) keeps its memory and identity; so does a buffer in
    a list held elsewhere, and one reached only through a view held elsewhere."""
    x, out = np.arange(4.0), np.empty(4)
    made = [np.empty(4) for _ in range(5)]
    kept, listed, viewed = made[0], [made[2]], made[4][1:3]
    ids = [id(b) for b in made]
    steps, writes = program((scale, (x, 2.0, made[0])), (scale, (made[0], 1.0, made[1])),
                            (scale, (x, 3.0, made[2])), (total, (listed, made[3])),
                            (fill, (7.0, made[4])), (add, (made[4], x, out)))
    plan(steps, writes, made)
    assert arg(steps, 0, 2) is kept and id(listed[0]) == ids[2] and arg(steps, 3, 0) is listed
    assert id(arg(steps, 4, 1)) == ids[4] and viewed.base is arg(steps, 4, 1)
    assert id(arg(steps, 1, 2)) == ids[1] and arg(steps, 3, 1).base is arg(steps, 1, 2)   # (free: it moves)


def test_read_before_write_keeps_its_value():
    """A buffer the replay reads before writing (a constant made at capture) lasts from call to call: it does
    not share with a later buffer whose lifetime does not overlap its own."""
    x, out = np.arange(5.0), np.empty(5)
    made = [np.full(5, 10.0), np.empty(5), np.empty(5)]
    steps, writes = program((add, (made[0], x, made[1])), (scale, (made[1], 2.0, made[2])),
                            (scale, (made[2], 1.0, out)))
    saved, _ = plan(steps, writes, made)
    constant = arg(steps, 0, 0)
    assert not any(np.shares_memory(constant, arg(steps, i, 2)) for i in (0, 1))
    assert saved == 0   # (t1 and t2 overlap at step 1: nothing else to share)
    for _ in range(3):
        run(steps)
        np.testing.assert_array_equal(out, (x + 10) * 2)


def test_slices_are_rebound_into_the_slab():
    """Views of a buffer that are 1-D runs of it become the same runs of its slab; values come out as before."""
    x, out = np.arange(8.0), np.empty(8)
    made = [np.empty(16), np.empty(8), np.empty(16)]   # (a first buffer, a packed one, a later one)
    steps, writes = program((scale, (np.arange(16.0), 1.0, made[0])), (total, ([made[0]], out[:1])),
                            (scale, (x[:4], 2.0, made[1][:4])), (scale, (x[4:], 3.0, made[1][4:])),
                            (add, (made[1], x, made[2][:8])), (add, (made[2][:8], x, out)))
    expected = None
    for _ in range(2):
        run(steps)
        expected = out.copy()
    plan(steps, writes, made)
    slab = arg(steps, 0, 2)
    low, high = arg(steps, 2, 2), arg(steps, 3, 2)
    assert low.base is slab and high.base is slab
    assert np.shares_memory(low, slab[:4]) and np.shares_memory(high, slab[4:8])
    assert low.__array_interface__["data"][0] == slab.__array_interface__["data"][0]
    assert high.__array_interface__["data"][0] == slab.__array_interface__["data"][0] + 4 * 8
    assert np.shares_memory(arg(steps, 4, 0), slab) and arg(steps, 4, 0).size == 8
    run(steps)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("view", ["strided", "other_dtype", "two_d_root"])
def test_odd_views_pin_their_buffer(view):
    """A buffer seen through a view that is not a 1-D run of its dtype, or a root that is not 1-D, stays put
    (a slab's slice of it would have another layout or type)."""
    x = np.arange(8.0)
    root = np.empty((2, 4)) if view == "two_d_root" else np.empty(8)
    seen = {"strided": lambda r: r[::2], "other_dtype": lambda r: r.view(np.int64)[:4],
            "two_d_root": lambda r: r.reshape(-1)}[view](root)
    made = [np.empty(8), root, np.empty(8)]
    steps, writes = program((scale, (x, 1.0, made[0])), (add, (made[0], x, made[2])),
                            (fill, (1, seen)), (total, ([seen], made[2][:1])))
    root_id = id(root)
    del seen, root
    plan(steps, writes, made)
    assert id(arg(steps, 2, 1).base) == root_id


def test_lists_of_multi_tensor_kernels_are_rebound_in_place():
    """Buffers in a multi-tensor kernel's list move into slabs; a list shared by two steps is changed in
    place once, and both steps then name the same slab memory."""
    x, out = np.arange(3.0), np.empty(1)
    made = [np.empty(3), np.empty(3), np.empty(3)]
    shared = [made[1], made[2]]
    steps, writes = program((scale, (x, 2.0, made[0])), (total, ([made[0]], out)), (fill, (1.0, made[1])),
                            (fill, (2.0, made[2])), (bump, (shared,)), (total, (shared, out)))
    del shared
    saved, _ = plan(steps, writes, made)
    assert saved == 3 * 8
    listed = arg(steps, 4, 0)
    assert arg(steps, 5, 0) is listed and listed[0] is arg(steps, 2, 1) and listed[0].base is arg(steps, 0, 2)
    run(steps)
    assert out[0] == 3 * 2 + 3 * 3


def test_a_list_shared_by_two_steps_counts_once():
    """The same list in two steps holds its buffers once: a buffer also held elsewhere is still pinned."""
    x, out = np.arange(3.0), np.empty(1)
    made = [np.empty(3), np.empty(3)]
    outside = made[1]
    shared = [made[1]]
    steps, writes = program((scale, (x, 2.0, made[0])), (total, ([made[0]], out)), (fill, (1.0, made[1])),
                            (bump, (shared,)), (total, (shared, out)))
    del shared
    plan(steps, writes, made)
    assert arg(steps, 3, 0)[0] is outside


@pytest.mark.parametrize("written_first", [True, False])
def test_a_reborn_buffer_lends_its_memory_between_its_values(written_first):
    """A buffer the capture handed out again (reborn at step 4) holds two values, steps 0-1 and 4-5; a buffer
    living at steps 2-3 takes its memory in between, unless the second value starts with a read (then the
    first value is taken to last through the gap)."""
    x, out, kept = np.arange(4.0), np.empty(4), np.empty(4)
    made = [np.empty(4), np.empty(4)]
    again = (fill, (5.0, made[0])) if written_first else (add, (made[0], x, out))
    steps, writes = program((scale, (x, 2.0, made[0])), (add, (made[0], x, out)), (scale, (out, 3.0, made[1])),
                            (add, (made[1], x, kept)), again, (add, (made[0], kept, out)))
    del again
    reborn = {id(made[0]): {id(steps[4][1])}}
    candidates = {id(b) for b in made}
    made.clear()
    saved, _ = share_memory(steps, writes, candidates, reborn)
    assert saved == (32 if written_first else 0)
    assert np.shares_memory(arg(steps, 2, 2), arg(steps, 0, 2)) == written_first
    if written_first:
        run(steps)
        np.testing.assert_array_equal(out, 5 + (x * 2 + x) * 3 + x)


# ------------------------------------------------------------------------------- compiled training, end to end
def same(a, b):
    np.testing.assert_array_equal(a.detach().cpu().numpy(), b.detach().cpu().numpy())


def train_both(make_model, make_opt, loss_fn, batches, steps=4, device="cpu"):
    """Train a model eagerly and through minidl.compile from the same start: losses, parameters and gradients
    equal bit for bit after every step. Returns the compiled step's graph."""
    runs = []
    for _ in range(2):
        minidl.manual_seed(1)
        model = make_model().to(minidl.float64).to(device)
        opt = make_opt(model.parameters())

        def step(x, y, model=model, opt=opt):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss
        runs.append((model, step))
    (eager_model, eager), (model, compiled) = runs[0], (runs[1][0], minidl.compile(runs[1][1]))
    for i in range(steps):
        x, y = (t.to(device) for t in batches(i))
        same(eager(x, y), compiled(x, y))
        for p, q in zip(eager_model.parameters(), model.parameters()):
            same(p, q)
            same(p.grad, q.grad)
        for b, c in zip(eager_model.buffers(), model.buffers()):
            same(b, c)
    fn = compiled._minidl_compiled
    assert not fn.eager and [len(g) for g in fn.graphs.values()] == [1]
    return next(iter(fn.graphs.values()))[0]


def data(seed, *shape):
    return minidl.from_numpy(np.random.default_rng(seed).standard_normal(shape))


def classes(seed, n, k):
    return minidl.from_numpy(np.random.default_rng(seed).integers(0, k, n).astype(np.int64))


def test_mlp_with_adam():
    make = lambda: nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))  # noqa
    graph = train_both(make, lambda p: minidl.optim.Adam(p, lr=1e-2), F.cross_entropy,
                       lambda i: (data(i, 16, 8), classes(i, 16, 4)))
    assert graph.saved_bytes > 0 and graph.held_bytes > 0


def test_mlp_on_cuda():
    """On 'cuda' (CuPy buffers on a GPU, else the simulator's): constants are copied from device copies."""
    cuda_device()
    make = lambda: nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))  # noqa: E731
    graph = train_both(make, lambda p: minidl.optim.Adam(p, lr=1e-2), F.cross_entropy,
                       lambda i: (data(i, 16, 8), classes(i, 16, 4)), device="cuda")
    assert graph.saved_bytes > 0


def test_conv_net_with_batch_norm():
    make = lambda: nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),  # noqa
                                 nn.Conv2d(4, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(32, 10))
    graph = train_both(make, lambda p: minidl.optim.SGD(p, lr=0.05, momentum=0.9), F.cross_entropy,
                       lambda i: (data(20 + i, 4, 1, 8, 8), classes(i, 4, 10)))
    assert graph.saved_bytes > 0


def test_tiny_gpt_of_the_benchmark():
    from gpt_case import VOCAB, tiny_gpt
    make = tiny_gpt
    tokens = [minidl.from_numpy(t) for t in np.random.default_rng(3).integers(0, VOCAB, (4, 2, 9))]
    batches = lambda i: (tokens[i][:, :-1].contiguous(), tokens[i][:, 1:].contiguous())  # noqa: E731
    loss = lambda out, y: F.cross_entropy(out.view(-1, VOCAB), y.view(-1))  # noqa: E731
    graph = train_both(make, lambda p: minidl.optim.AdamW(p, lr=1e-3, weight_decay=0.1), loss, batches)
    assert graph.saved_bytes > 0


def test_tensor_made_from_a_2d_host_array_and_written():
    """A CPU tensor made from host data inside the call is the host array (2-D here) itself: written, it is
    restored at each replay's start; it must keep its own memory (a slab is a flat buffer)."""
    def f(x):
        c = minidl.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=minidl.float64)
        c.mul_(x)
        return ((c * 2) + 1).sum() + ((x * 3) - 1).sum()
    compiled = minidl.compile(f)
    for i in range(3):
        x = data(i, 2, 2)
        same(f(x), compiled(x))
    assert sum(len(g) for g in compiled._minidl_compiled.graphs.values()) == 1


def test_old_buffers_are_freed_after_the_plan(monkeypatch):
    """Once captured and planned, a buffer no step names any more is freed: the graph holds only its slabs
    (and what it kept)."""
    before = []

    def watched(steps, *rest):
        before.extend(weakref.ref(b) for b in roots(steps).values())
        return share_memory(steps, *rest)
    monkeypatch.setattr(graph_module, "share_memory", watched)
    make = lambda: nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))  # noqa: E731
    graph = train_both(make, lambda p: minidl.optim.SGD(p, lr=0.1), F.cross_entropy,
                       lambda i: (data(i, 16, 8), classes(i, 16, 4)), steps=2)
    gc.collect()
    now = roots(graph.steps)
    alive = [r() for r in before if r() is not None]
    assert graph.saved_bytes > 0 and len(alive) < len(before)
    assert all(id(b) in now for b in alive)


def roots(steps) -> dict:
    """id -> each root buffer the steps name."""
    found = {}
    for _, args in steps:
        for a in args:
            for b in a if isinstance(a, list) else (a,):
                if isinstance(b, np.ndarray):
                    found[id(b if b.base is None else b.base)] = b if b.base is None else b.base
    return found


def traced_peak(fn, *args) -> int:
    """The most bytes allocated at once while ``fn(*args)`` runs (numpy's buffers are traced)."""
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        fn(*args)
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def test_capture_reuses_spent_buffers_and_a_replay_allocates_nothing():
    """The capture hands a spent buffer (one only the steps name) to the next alloc of its size, so it holds about
    what the eager call holds, not one buffer per op (60 here); a replay allocates no buffer at all."""
    def chain(x):
        for _ in range(20):
            x = (x * 1.5 + 1.0).tanh()
        return x.sum()
    x = data(0, 50_000)
    size = x.numel() * 8
    minidl.compile(chain)(x)   # (its fused kernel compiled once, so that the peak below is the buffers')
    compiled = minidl.compile(chain)
    eager_peak, capture_peak = traced_peak(chain, x), traced_peak(compiled, x)
    # (within three buffers of eager's: the graph's own input, and the fused chain's row for its sum)
    assert eager_peak >= 2 * size and capture_peak <= eager_peak + 3 * size
    assert traced_peak(compiled, x) < size / 10
    for i in range(3):
        x = data(i, 50_000)
        same(chain(x), compiled(x))
    graph = next(iter(compiled._minidl_compiled.graphs.values()))[0]
    assert graph.held_bytes <= 5 * size


def test_a_buffer_still_seen_is_not_handed_out_again():
    """A buffer whose tensor is gone but which a view still shows is not spent: the allocs of its size that
    follow get other memory, in the capture as eagerly."""
    def f(x):
        a = x * 2
        kept = a[1:]
        del a
        b = ((x + 1) * 3).exp()
        return kept.sum() + b.sum()
    compiled = minidl.compile(f)
    for i in range(3):
        x = data(i, 1000)
        same(f(x), compiled(x))
    assert sum(len(g) for g in compiled._minidl_compiled.graphs.values()) == 1
