"""bfloat16: storage as bits, conversions, semantics and ops, against PyTorch 2.13 (whose CPU build
computes bfloat16 in float32 and rounds on store, as minidl does), and the CUDA kernels against the
CPU's bit for bit (on the simulator where there is no GPU)."""
import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import kernels

from cuda_support import cuda_device

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def bits(t) -> np.ndarray:
    """The uint16 bits of a bfloat16 tensor's elements (read from its storage: numpy has no bfloat16)."""
    t = t.contiguous()
    host = np.asarray(kernels.get("to_host", t.device.type)(t._storage.buf))
    return host[t._layout.offset:t._layout.offset + t.numel()].view(np.uint16).reshape(t.shape)


def torch_bits(t) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def assert_same_bfloat16(got_bits, want_bits, context=""):
    """Equal bits, except that any NaN equals any NaN (PyTorch's vectorised and scalar paths write
    different NaN payloads)."""
    got, want = np.asarray(got_bits, np.uint16), np.asarray(want_bits, np.uint16)
    nan_got, nan_want = (got & 0x7FFF) > 0x7F80, (want & 0x7FFF) > 0x7F80
    np.testing.assert_array_equal(nan_got, nan_want, err_msg=context)
    np.testing.assert_array_equal(got[~nan_got], want[~nan_want], err_msg=context)


def every_bfloat16() -> np.ndarray:
    """The float32 value of every bfloat16 bit pattern (NaNs included), as PyTorch widens them."""
    patterns = torch.from_numpy(np.arange(1 << 16, dtype=np.uint16).view(np.int16))
    return patterns.view(torch.bfloat16).float().numpy()


def float32_probes() -> np.ndarray:
    """Random float32 bit patterns, ties to even both ways, overflow to inf, subnormals, NaNs."""
    rng = np.random.default_rng(0)
    random = rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32)
    ties = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x3F808001, 0x3F807FFF, 0x7F7F8000, 0x7F7FFFFF,
                     0x00008000, 0x00018000, 0x80000001, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,
                     0x7F800001, 0x00000000, 0x80000000], dtype=np.uint32)
    return np.concatenate([random, ties]).view(np.float32)


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    if request.param == "cuda":
        cuda_device()
    return request.param


# ----------------------------------------------------------------------------- storage and conversions
def test_every_bit_pattern_round_trips_and_widens_exactly(device):
    values = every_bfloat16()
    t = minidl.tensor(values).to(device).bfloat16()
    assert t.dtype is minidl.bfloat16 and t.element_size() == 2 and t.itemsize == 2
    want = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    assert_same_bfloat16(bits(t), want)
    widened = t.float().cpu().numpy()
    finite = np.isfinite(values) | np.isinf(values)
    np.testing.assert_array_equal(widened.view(np.uint32)[finite], values.view(np.uint32)[finite])
    assert np.isnan(widened[~finite]).all()


@pytest.mark.parametrize("src", ["float32", "float64", "float16", "int64", "int32", "int16", "uint8", "bool"])
def test_every_dtype_narrows_to_bfloat16_as_torch(src, device):
    probes = float32_probes()
    if src == "float64":
        with np.errstate(invalid="ignore"):  # (NaN payloads)
            probes = np.concatenate([probes.astype(np.float64), 1 + 2.0 ** -8 + 2.0 ** -30 * np.arange(3)])
    elif src != "float32":
        with np.errstate(over="ignore", invalid="ignore"):
            probes = probes.astype(np.float64).astype(src) if src != "bool" else probes != 0
        if src.startswith("int"):
            probes = np.concatenate([probes, np.array([2 ** 32 + 2 ** 24 + 1, -(2 ** 40) - 3]).astype(src)])
    theirs = torch.from_numpy(np.ascontiguousarray(probes)).to(torch.bfloat16)
    ours = minidl.from_numpy(np.ascontiguousarray(probes)).to(device).to(minidl.bfloat16)
    assert_same_bfloat16(bits(ours), torch_bits(theirs), f"{src} -> bfloat16")


@pytest.mark.parametrize("dst", ["float32", "float64", "float16", "int64", "int32", "int16", "uint8", "bool"])
def test_bfloat16_widens_and_converts_to_every_dtype_as_torch(dst, device):
    values = every_bfloat16()
    if dst not in ("float32", "float64", "float16", "bool"):
        # in range of the target: beyond it, float to integer is PyTorch's x86 result (tests/test_casts.py)
        info = np.iinfo(dst)
        values = values[np.isfinite(values) & (values > info.min - 1) & (values < info.max + 1)]
    theirs = torch.from_numpy(values).to(torch.bfloat16).to(getattr(torch, dst))
    ours = minidl.tensor(values).to(device).to(minidl.bfloat16).to(getattr(minidl, dst))
    np.testing.assert_array_equal(ours.cpu().numpy(), theirs.numpy(), err_msg=f"bfloat16 -> {dst}")


def test_strided_and_reversed_copies_keep_the_bits(device):
    t = minidl.tensor(float32_probes()[:999]).to(device).bfloat16()
    want = bits(t)
    assert_same_bfloat16(bits(t.flip(0)), want[::-1])
    assert_same_bfloat16(bits(t[::3].contiguous()), want[::3])
    assert_same_bfloat16(bits(t.reshape(27, 37).t().contiguous()), want.reshape(27, 37).T)
    assert_same_bfloat16(bits(t.clone()), want)


def test_the_cuda_kernels_convert_as_the_cpu_bit_for_bit():
    probes = float32_probes()
    on_cpu = minidl.tensor(probes).bfloat16()
    cuda_device()
    on_cuda = minidl.tensor(probes, device="cuda").bfloat16()
    np.testing.assert_array_equal(bits(on_cuda), bits(on_cpu))
    for dst in ("float16", "float64", "int32", "uint8", "bool"):
        np.testing.assert_array_equal(on_cuda.to(getattr(minidl, dst)).cpu().numpy(),
                                      on_cpu.to(getattr(minidl, dst)).numpy(), err_msg=dst)
    np.testing.assert_array_equal(bits((on_cuda * 3 - 1).exp()), bits((on_cpu * 3 - 1).exp()))


# ----------------------------------------------------------------------------- semantics
def test_factories_and_conversions_give_bfloat16(device):
    b = minidl.bfloat16
    for t in (minidl.zeros(2, 3, dtype=b, device=device), minidl.ones(4, dtype=b, device=device),
              minidl.full((2,), 1 / 3, dtype=b, device=device), minidl.arange(5, dtype=b, device=device),
              minidl.rand(3, dtype=b, device=device), minidl.randn(3, dtype=b, device=device),
              minidl.tensor([1.0, 2.5], dtype=b, device=device), minidl.ones(2, device=device).bfloat16(),
              minidl.ones(2, device=device).to(b), minidl.empty(3, dtype=b, device=device),
              minidl.zeros_like(minidl.ones(2, device=device), dtype=b), minidl.linspace(0, 1, 5, dtype=b),
              minidl.eye(3, dtype=b)):
        assert t.dtype is b
    np.testing.assert_array_equal(minidl.full((2,), 1 / 3, dtype=b).tolist(),
                                  torch.full((2,), 1 / 3, dtype=torch.bfloat16).tolist())
    np.testing.assert_allclose(minidl.linspace(0, 1, 7, dtype=b).tolist(),  # torch steps in bfloat16
                               torch.linspace(0, 1, 7, dtype=torch.bfloat16).tolist(), rtol=2 ** -7)
    assert minidl.tensor(1 / 3, dtype=b).item() == torch.tensor(1 / 3, dtype=torch.bfloat16).item() == 0.333984375
    assert isinstance(minidl.tensor([1.5], dtype=b).tolist()[0], float)


def test_numpy_refuses_bfloat16_as_torch():
    for module in (minidl, torch):
        t = module.tensor([1.0], dtype=module.bfloat16)
        with pytest.raises(TypeError, match="^Got unsupported ScalarType BFloat16$"):
            t.numpy()
        with pytest.raises(TypeError, match="^Got unsupported ScalarType BFloat16$"):
            np.asarray(t)
    assert np.asarray(minidl.tensor([1.0], dtype=minidl.bfloat16).float()).dtype == np.float32


def test_finfo_and_printing_match_torch():
    ours, theirs = minidl.finfo(minidl.bfloat16), torch.finfo(torch.bfloat16)
    for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert ours.dtype == "bfloat16"
    for values in ([1.0, 2.5, 1 / 3], [[1.0, -2.0], [3.0, 4.0]], [1e-5, 3e7], [float("nan"), float("inf")], 2.0):
        assert repr(minidl.tensor(values, dtype=minidl.bfloat16)) == \
            repr(torch.tensor(values, dtype=torch.bfloat16)).replace("torch.", "minidl.")


def test_mixed_dtypes_promote_as_torch():
    b = minidl.tensor([1.5, -2.0], dtype=minidl.bfloat16)
    tb = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    for other in ("float16", "float32", "float64", "int32", "uint8", "bool"):
        mo = minidl.tensor([1, 0], dtype=getattr(minidl, other))
        to = torch.tensor([1, 0], dtype=getattr(torch, other))
        assert (b + mo).dtype.name == str((tb + to).dtype)[6:], other
        assert (b + mo).tolist() == (tb + to).tolist(), other
    for scalar in (2, 2.5, True):
        assert (b * scalar).dtype is minidl.bfloat16
        assert (b * scalar).tolist() == (tb * scalar).tolist()
    assert (minidl.tensor([3]) / b).dtype is minidl.bfloat16


def test_module_bfloat16_converts_floating_parameters_and_buffers():
    m = minidl.nn.Sequential(minidl.nn.Linear(3, 2), minidl.nn.BatchNorm1d(2)).bfloat16()
    assert all(p.dtype is minidl.bfloat16 for p in m.parameters())
    assert m[1].running_mean.dtype is minidl.bfloat16 and m[1].num_batches_tracked.dtype is minidl.int64


# ----------------------------------------------------------------------------- ops against torch
def _inputs(seed, *shapes, positive=False):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    return [np.abs(a) + 0.1 if positive else a for a in arrays]


# (name, function of the module and its tensors, input shapes, positive inputs, exact)
# exact: both compute in float32 and round once, with correctly rounded float32 arithmetic
OPS = [
    ("add", lambda m, a, b: a + b, [(5, 7), (7,)], False, True),
    ("sub", lambda m, a, b: a - b, [(5, 7), (5, 7)], False, True),
    ("mul", lambda m, a, b: a * b, [(5, 7), (5, 1)], False, True),
    ("div", lambda m, a, b: a / b, [(5, 7), (5, 7)], True, True),
    ("scalar ops", lambda m, a: (a * 3 + 0.5) / 7 - 2, [(64,)], False, True),
    ("neg abs", lambda m, a: (-a).abs(), [(64,)], False, True),
    ("sqrt", lambda m, a: a.sqrt(), [(64,)], True, True),
    ("maximum minimum", lambda m, a, b: m.maximum(a, b) - m.minimum(a, b), [(64,), (64,)], False, True),
    ("relu clamp", lambda m, a: a.relu() + a.clamp(-0.5, 0.5), [(64,)], False, True),
    ("floor ceil round", lambda m, a: (a * 4).floor() + (a * 4).ceil() + (a * 4).round(), [(64,)], False, True),
    ("where", lambda m, a, b: m.where(a > b, a, b), [(64,), (64,)], False, True),
    ("comparisons", lambda m, a, b: ((a < b).int() + (a == a).int() + (a >= b).int()), [(64,), (64,)], False, True),
    ("exp log", lambda m, a: a.exp() + a.log(), [(64,)], True, False),
    ("tanh sigmoid", lambda m, a: a.tanh() * a.sigmoid(), [(64,)], False, False),
    ("sin cos", lambda m, a: a.sin() - a.cos(), [(64,)], False, False),
    ("pow", lambda m, a, b: a ** b, [(64,), (64,)], True, False),
    ("gelu silu", lambda m, a: m.nn.functional.gelu(a) + m.nn.functional.silu(a), [(64,)], False, False),
    ("sum mean", lambda m, a: a.sum(1) + a.mean(1), [(6, 50)], False, False),
    ("max argmax", lambda m, a: a.max(0).values + a.argmax(0), [(6, 50)], False, True),
    ("cumsum", lambda m, a: a.cumsum(1), [(4, 20)], False, False),
    ("var std", lambda m, a: a.var(1) + a.std(1), [(6, 50)], False, False),
    ("softmax", lambda m, a: m.softmax(a, 1) + m.log_softmax(a, 1), [(6, 30)], False, False),
    ("matmul", lambda m, a, b: a @ b, [(9, 33), (33, 5)], False, False),
    ("bmm", lambda m, a, b: m.bmm(a, b), [(2, 9, 33), (2, 33, 5)], False, False),
    ("linear", lambda m, a, w, b: m.nn.functional.linear(a, w, b), [(4, 30), (6, 30), (6,)], False, False),
    ("conv2d", lambda m, a, w: m.nn.functional.conv2d(a, w, padding=1), [(2, 3, 8, 8), (4, 3, 3, 3)], False, False),
    ("max_pool2d", lambda m, a: m.nn.functional.max_pool2d(a, 2), [(2, 3, 8, 8)], False, True),
    ("layer_norm", lambda m, a: m.nn.functional.layer_norm(a, (16,)), [(5, 16)], False, False),
    ("gather", lambda m, a: a.gather(1, m.tensor([[0, 3], [2, 2], [1, 0]])), [(3, 5)], False, True),
    ("index_add", lambda m, a, v: a.index_add(0, m.tensor([0, 2, 0]), v), [(3, 5), (3, 5)], False, True),
    ("masked_fill", lambda m, a: a.masked_fill(a > 0, 0.3), [(64,)], False, True),
    ("sort", lambda m, a: a.sort(1).values, [(4, 20)], False, True),
    ("cat stack", lambda m, a, b: m.cat([a, b]) + m.stack([a, b]).sum(0).repeat(2, 1), [(3, 4), (3, 4)], False,
     True),
]


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
@pytest.mark.parametrize("name, fn, shapes, positive, exact", OPS, ids=[op[0] for op in OPS])
def test_ops_compute_in_float32_and_round_as_torch(name, fn, shapes, positive, exact, half):
    """Both half types: every op that takes float16 takes bfloat16, the same way."""
    arrays = _inputs(len(name), *shapes, positive=positive)
    ours = fn(minidl, *(minidl.tensor(a, dtype=getattr(minidl, half)) for a in arrays))
    theirs = fn(torch, *(torch.tensor(a, dtype=getattr(torch, half)) for a in arrays))
    assert ours.dtype.name == str(theirs.dtype)[6:]
    got, want = ours.float().numpy(), theirs.float().numpy()
    if exact:
        np.testing.assert_array_equal(got, want)
    else:  # libm differences and summation orders: a few bfloat16 ulps (2**-8 of the value each)
        np.testing.assert_allclose(got, want, rtol=2 ** -6, atol=2 ** -6 * float(np.abs(want).max()))


def test_gradients_flow_in_bfloat16_as_torch():
    x, w, b, target = _inputs(1, (8, 12), (5, 12), (5,), (8,))
    labels = (np.abs(target * 10).astype(np.int64)) % 5
    results = []
    for m in (minidl, torch):
        ts = [m.tensor(a).bfloat16().requires_grad_() for a in (x, w, b)]
        loss = m.nn.functional.cross_entropy(m.nn.functional.linear(ts[0], ts[1], ts[2]).tanh(), m.tensor(labels))
        loss.backward()
        assert loss.dtype is m.bfloat16 and all(t.grad.dtype is m.bfloat16 for t in ts)
        results.append([loss.float().item()] + [t.grad.float().numpy() for t in ts])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=2 ** -5, atol=2 ** -7)


def test_a_bfloat16_model_trains_with_sgd_and_adam():
    minidl.manual_seed(0)
    x = minidl.randn(64, 4)
    y = (x @ minidl.tensor([[1.0], [-2.0], [0.5], [3.0]])).bfloat16()
    for make in (lambda p: minidl.optim.SGD(p, lr=0.05, momentum=0.9), lambda p: minidl.optim.Adam(p, lr=0.05)):
        model = minidl.nn.Linear(4, 1).bfloat16()
        opt = make(model.parameters())
        first = None
        for _ in range(60):
            opt.zero_grad()
            loss = F.mse_loss(model(x.bfloat16()), y)
            loss.backward()
            opt.step()
            first = loss.item() if first is None else first
        assert model.weight.dtype is minidl.bfloat16 and loss.item() < first / 20


def test_collectives_reduce_bfloat16_in_float32_and_round_once():
    """Oracle: the float32 sum (max, mean) of the ranks' bfloat16 values, rounded once by torch."""
    import minidl.dist as dist
    size, n = 3, 257
    values = [np.asarray(torch.tensor(_inputs(10 + r, (n,))[0]).bfloat16().float()) for r in range(size)]
    total = np.sum(values, axis=0, dtype=np.float32)  # (exact order does not matter: ties are rare)
    want = {op: torch.tensor(v).bfloat16().float().numpy() for op, v in
            (("sum", total), ("avg", total / np.float32(size)), ("max", np.max(values, axis=0)))}

    def fn(rank):
        mine = minidl.tensor(values[rank]).bfloat16()
        for op, name in ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.AVG, "avg"), (dist.ReduceOp.MAX, "max")):
            t = mine.clone()
            dist.all_reduce(t, op=op)
            np.testing.assert_allclose(t.float().numpy(), want[name], rtol=2 ** -8, err_msg=name)
        t = mine.clone()
        dist.reduce(t, dst=1)
        if rank == 1:
            np.testing.assert_allclose(t.float().numpy(), want["sum"], rtol=2 ** -8)
        out = minidl.zeros(n, dtype=minidl.bfloat16)
        dist.reduce_scatter(out, [mine.clone() for _ in range(size)])
        np.testing.assert_allclose(out.float().numpy(), want["sum"], rtol=2 ** -8)
        t = mine.clone()
        dist.broadcast(t, src=2)
        assert_same_bfloat16(bits(t), bits(minidl.tensor(values[2]).bfloat16()))
    dist.sim.run(size, fn)
@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_python_numbers_are_rounded_to_the_half_type_first_as_torch(half):
    values = _inputs(3, (2000,))[0] * 8
    ours, theirs = minidl.tensor(values, dtype=getattr(minidl, half)), torch.tensor(values, dtype=getattr(torch, half))
    for s in (1.1, -0.3, 7, 1000001, 2.5e-3):
        for fn in (lambda x: x == s, lambda x: x > s, lambda x: x + s, lambda x: s - x, lambda x: x / s,
                   lambda x: x % s, lambda x: x.abs() ** (s % 3)):
            got, want = fn(ours), fn(theirs)
            assert got.dtype.name == str(want.dtype)[6:]
            np.testing.assert_array_equal(got.float().numpy(), want.float().numpy(), err_msg=f"{half} {s}")


def test_gelu_rounds_once_as_torch():
    x = np.linspace(-6, 4, 401, dtype=np.float32)
    for approximate in ("none", "tanh"):
        ours = F.gelu(minidl.tensor(x).bfloat16(), approximate=approximate).float().numpy()
        theirs = TF.gelu(torch.tensor(x).bfloat16(), approximate=approximate).float().numpy()
        np.testing.assert_allclose(ours, theirs, rtol=2 ** -7, atol=1e-6)  # (float32 erf cancels near -5)


def test_random_draws_and_lists_of_tensors_take_bfloat16():
    b = minidl.bfloat16
    assert minidl.bernoulli(minidl.full((3,), 1.0, dtype=b)).tolist() == [1.0, 1.0, 1.0]
    assert minidl.multinomial(minidl.tensor([0.0, 1.0], dtype=b), 1).tolist() == [1]
    cases = [lambda m: [m.tensor(1.5, dtype=m.bfloat16), m.tensor(2.0, dtype=m.bfloat16)],
             lambda m: [m.tensor(1.5, dtype=m.bfloat16), 2.5], lambda m: [[m.tensor(1, dtype=m.int32)]],
             lambda m: [m.tensor(1.5, dtype=m.float16), m.tensor(2.0, dtype=m.bfloat16)],
             lambda m: [m.tensor(1.5, dtype=m.float64), 1]]
    for case in cases:
        assert minidl.tensor(case(minidl)).dtype.name == str(torch.tensor(case(torch)).dtype)[6:]


def test_relu_and_reflected_division_as_torch():
    values = [-float("inf"), -3.0, float("nan"), -0.0, 0.0, 2.5]
    for name in ("float32", "float64", "bfloat16"):
        ours = minidl.tensor(values, dtype=getattr(minidl, name)).relu().tolist()
        theirs = torch.tensor(values, dtype=getattr(torch, name)).relu().tolist()
        np.testing.assert_array_equal(np.array(ours), np.array(theirs), err_msg=name)  # relu(-inf) was NaN
        assert np.signbit(ours[3]) and not np.signbit(ours[1])  # -0.0 passes, negatives give +0.0
    x = _inputs(5, (500,))[0]
    for name in ("float32", "bfloat16", "float16"):
        ours = 1.1 / minidl.tensor(x, dtype=getattr(minidl, name))  # torch: reciprocal() * 1.1
        theirs = 1.1 / torch.tensor(x, dtype=getattr(torch, name))
        np.testing.assert_array_equal(ours.float().numpy(), theirs.float().numpy(), err_msg=name)


def test_addmm_and_baddbmm_round_once_as_torch():
    x, a, b = _inputs(6, (4, 5), (4, 9), (9, 5))
    ours = minidl.addmm(*(minidl.tensor(v).bfloat16() for v in (x, a, b)), beta=0.5, alpha=1.5)
    theirs = torch.addmm(*(torch.tensor(v).bfloat16() for v in (x, a, b)), beta=0.5, alpha=1.5)
    assert ours.dtype is minidl.bfloat16
    np.testing.assert_allclose(ours.float().numpy(), theirs.float().numpy(), rtol=2 ** -8, atol=2 ** -9)
    xb, ab, bb = _inputs(7, (2, 4, 5), (2, 4, 9), (2, 9, 5))
    ours = minidl.baddbmm(*(minidl.tensor(v).bfloat16() for v in (xb, ab, bb)))
    theirs = torch.baddbmm(*(torch.tensor(v).bfloat16() for v in (xb, ab, bb)))
    np.testing.assert_allclose(ours.float().numpy(), theirs.float().numpy(), rtol=2 ** -8, atol=2 ** -9)
