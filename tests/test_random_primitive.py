"""The ``random`` primitive and the generators over it: Philox4x32-10 checked against the published
known-answer vectors, the same bits on the CPU and on device 'cuda', statistics of each kind, and a
generator state of (seed, offset) that every draw advances by what it used."""
import numpy as np
import pytest

import minidl
from minidl import kernels
from tests.cuda_support import cuda_device

_M, _W, _MASK = (0xD2511F53, 0xCD9E8D57), (0x9E3779B9, 0xBB67AE85), 0xFFFFFFFF


def philox_reference(counter, key):
    """Philox4x32-10 in plain Python integers (Salmon et al., SC'11)."""
    c, k = list(counter), list(key)
    for r in range(10):
        if r:
            k = [(k[0] + _W[0]) & _MASK, (k[1] + _W[1]) & _MASK]
        p0, p1 = _M[0] * c[0], _M[1] * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & _MASK, (p0 >> 32) ^ c[3] ^ k[1], p0 & _MASK]
    return c


def test_reference_matches_the_known_answer_vectors():
    assert philox_reference([0] * 4, [0] * 2) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox_reference([_MASK] * 4, [_MASK] * 2) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert philox_reference([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0]) == \
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def _words(seed, offset, n):
    return [philox_reference([(offset + i) & _MASK, ((offset + i) >> 32) & _MASK, 0, 0],
                             [seed & _MASK, seed >> 32]) for i in range(n)]


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    if request.param == "cuda":
        cuda_device()
    return request.param


def _run(device, kind, dtype, seed, offset, a, b, n=64):
    """The primitive's output on ``device``, as a numpy array."""
    out = minidl.empty(n, dtype=dtype, device=device)
    kernels.get("random", device)(kind, out._storage.buf, seed, offset, a, b)
    return out.cpu().numpy()


def test_each_kind_follows_the_contract_formulas(device):
    seed, offset = 2 ** 64 - 7, 2 ** 32 - 3   # the counter carries into its high word
    words = _words(seed, offset, 8)
    u24 = np.array([(w[0] >> 8) * 2.0 ** -24 for w in words])
    u53 = np.array([(((w[1] << 32) | w[0]) >> 11) * 2.0 ** -53 for w in words])
    np.testing.assert_array_equal(_run(device, "uniform", minidl.float32, seed, offset, 0, 1, 8), u24.astype(np.float32))
    np.testing.assert_array_equal(_run(device, "uniform", minidl.float64, seed, offset, -2, 3, 8), -2 + 5 * u53)
    bits = [(w[1] << 32) | w[0] for w in words]
    np.testing.assert_array_equal(_run(device, "integers", minidl.int64, seed, offset, -5, 1000, 8),
                                  [-5 + b % 1005 for b in bits])
    full = _run(device, "integers", minidl.int64, seed, offset, -2 ** 63, 2 ** 63, 8)
    np.testing.assert_array_equal(full.view(np.uint64), np.array(bits, dtype=np.uint64) + np.uint64(2 ** 63))
    radius = np.sqrt(-2 * np.log(u53 + 2.0 ** -53))
    angle = np.array([(((w[3] << 32) | w[2]) >> 11) * 2.0 ** -53 for w in words])
    np.testing.assert_allclose(_run(device, "normal", minidl.float64, seed, offset, 1, 2, 8),
                               1 + 2 * radius * np.cos(2 * np.pi * angle), rtol=1e-13)


@pytest.mark.parametrize("kind, dtype, a, b", [("uniform", minidl.float32, 0, 1), ("uniform", minidl.float64, -3, 5),
                                               ("normal", minidl.float32, 0, 1), ("normal", minidl.float64, 2, 0.5),
                                               ("integers", minidl.int64, -7, 100)])
def test_cuda_gives_the_cpu_bits(kind, dtype, a, b):
    cuda_device()
    n = 3000  # several blocks and several elements per thread in the simulator
    cpu = _run("cpu", kind, dtype, 12345, 999, a, b, n)
    gpu = _run("cuda", kind, dtype, 12345, 999, a, b, n)
    if minidl.kernels.cuda.runtime.get().name == "sim" or kind != "normal":
        np.testing.assert_array_equal(cpu.view(np.uint8), gpu.view(np.uint8))
    else:  # a GPU's log and cos may differ from the host's libm in the last place
        np.testing.assert_allclose(cpu, gpu, rtol=1e-6 if dtype is minidl.float32 else 1e-14)


def test_primitive_rejects_bad_arguments(device):
    out = minidl.empty(4, dtype=minidl.int64, device=device)._storage.buf
    random = kernels.get("random", device)
    with pytest.raises(TypeError, match="random: kind 'uniform' fills float32 or float64"):
        random("uniform", out, 0, 0, 0.0, 1.0)
    with pytest.raises(ValueError, match="unknown kind 'gamma'"):
        random("gamma", out, 0, 0, 0.0, 1.0)
    with pytest.raises(ValueError, match=r"low < high, got \[3, 3\)"):
        random("integers", out, 0, 0, 3, 3)


# ----------------------------------------------------------------------------- statistics
def test_distributions(device):
    minidl.manual_seed(7)
    n = 20000 if device == "cpu" else 4000
    u = minidl.rand(n, device=device).cpu().numpy()
    assert u.dtype == np.float32 and 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 4 * (1 / 12 / n) ** 0.5 and abs(u.var() - 1 / 12) < 0.01
    z = minidl.randn(n, dtype=minidl.float64, device=device).cpu().numpy()
    assert abs(z.mean()) < 4 / n ** 0.5 and abs(z.var() - 1) < 0.1
    assert abs(((z > 1.96) | (z < -1.96)).mean() - 0.05) < 0.015          # the tails of a normal
    k = minidl.randint(-3, 4, (n,), device=device).cpu().numpy()
    counts = np.bincount(k + 3, minlength=7)
    assert k.min() == -3 and k.max() == 3 and (np.abs(counts / n - 1 / 7) < 0.02).all()
    # successive draws are uncorrelated, with each other and element to element
    a, b = minidl.rand(n, device=device).cpu().numpy(), minidl.rand(n, device=device).cpu().numpy()
    assert abs(np.corrcoef(a, b)[0, 1]) < 4 / n ** 0.5 and abs(np.corrcoef(a[1:], a[:-1])[0, 1]) < 4 / n ** 0.5


def test_tensor_fills_and_bernoulli(device):
    minidl.manual_seed(3)
    host = lambda t: t.cpu().numpy()  # noqa: E731  (statistics on the host: reductions are not needed on the GPU)
    x = minidl.empty(4000, device=device)
    assert host(x.uniform_(-2, 3)).min() >= -2 and host(x).max() < 3
    assert abs(host(x.normal_(5, 0.5)).mean() - 5) < 0.05
    mask = host(minidl.empty(4000, device=device).bernoulli_(0.3))
    assert set(np.unique(mask)) <= {0.0, 1.0} and abs(mask.mean() - 0.3) < 0.04
    p = minidl.tensor([0.0, 1.0], device=device).expand(2000, 2)
    drawn = host(minidl.bernoulli(p))
    assert (drawn[:, 0] == 0).all() and (drawn[:, 1] == 1).all()
    e = host(minidl.empty(4000, dtype=minidl.float64, device=device).exponential_(2.0))
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.05
    ints = host(minidl.empty(1000, dtype=minidl.int32, device=device).random_(5, 9))
    assert ints.min() == 5 and ints.max() == 8
    assert minidl.rand(10, dtype=minidl.float16, device=device).dtype is minidl.float16
    with pytest.raises(RuntimeError, match="rand: expected a floating point dtype, got int64"):
        minidl.rand(3, dtype=minidl.int64, device=device)
    with pytest.raises(RuntimeError, match="bernoulli: expected all probabilities in"):
        minidl.empty(3).bernoulli_(1.5)


# ----------------------------------------------------------------------------- generator state
def test_state_is_seed_and_offset_advanced_by_each_draw():
    g = minidl.Generator().manual_seed(11)
    assert g.get_state().tolist() == list((11).to_bytes(8, "little") + (0).to_bytes(8, "little"))
    first = minidl.rand(5, generator=g)
    assert g.get_state().numpy()[8:].view(np.uint64)[0] == 5
    state = g.get_state()
    second = minidl.randn(7, generator=g)
    g.set_state(state)
    assert minidl.equal(minidl.randn(7, generator=g), second)
    # a draw of n continues where the last one stopped: two halves equal one whole
    whole = minidl.rand(12, generator=minidl.Generator().manual_seed(11))
    assert minidl.equal(whole[:5], first)
    with pytest.raises(RuntimeError, match="expected a state of 16 bytes"):
        g.set_state(minidl.zeros(3, dtype=minidl.uint8))


def test_seeded_draws_repeat_and_match_across_devices():
    cuda_device()
    minidl.manual_seed(2024)
    cpu = [minidl.rand(100), minidl.randn(3, 5), minidl.randint(0, 10, (50,))]
    minidl.manual_seed(2024)   # seeds the GPUs' generators too, as torch.manual_seed does
    gpu = [minidl.rand(100, device="cuda"), minidl.randn(3, 5, device="cuda"),
           minidl.randint(0, 10, (50,), device="cuda")]
    for c, d in zip(cpu, gpu):
        assert d.is_cuda and np.array_equal(c.numpy(), d.cpu().numpy())
    minidl.cuda.manual_seed(5)
    state = minidl.cuda.get_rng_state()
    a = minidl.rand(9, device="cuda")
    minidl.cuda.set_rng_state(state)
    assert minidl.equal(minidl.rand(9, device="cuda").cpu(), a.cpu())
    before = minidl.get_rng_state()
    minidl.rand(9, device="cuda")   # draws on the GPU leave the CPU generator alone
    assert minidl.equal(minidl.get_rng_state(), before)
    minidl.cuda.manual_seed_all(5)
    assert minidl.cuda.initial_seed() == 5


def test_host_draws_come_from_the_same_state():
    g = minidl.Generator().manual_seed(1)
    perm = minidl.randperm(10, generator=g)
    assert sorted(perm.tolist()) == list(range(10)) and g.get_state().numpy()[8] == 1
    assert minidl.equal(minidl.randperm(10, generator=minidl.Generator().manual_seed(1)), perm)
