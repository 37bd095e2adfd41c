"""minidl.accelerator, the Tensor.is_<device> predicates and dropout1d/2d/3d against PyTorch: the
answers on this machine, error types and texts, warning texts (and where they point), and which
elements dropout zeroes together."""
import re
import warnings

import numpy as np
import pytest

import minidl
import minidl.accelerator as acc
import minidl.nn.functional as F
from minidl import nn
from minidl.kernels.cuda import runtime
from tests.cuda_support import sim_cuda_device

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

DEVICE_PREDICATES = ["is_cpu", "is_cuda", "is_ipu", "is_maia", "is_meta", "is_mkldnn", "is_mps", "is_mtia",
                     "is_vulkan", "is_xla", "is_xpu"]
# torch.Tensor's is_* names that are not about the device
OTHER_PREDICATES = {"is_coalesced", "is_complex", "is_conj", "is_contiguous", "is_distributed", "is_floating_point",
                    "is_inference", "is_leaf", "is_neg", "is_nested", "is_nonzero", "is_pinned", "is_quantized",
                    "is_same_size", "is_set_to", "is_shared", "is_signed", "is_sparse", "is_sparse_csr"}


@pytest.fixture
def sim_state():
    saved = runtime._sim_requested
    yield
    runtime.sim_enable(saved)


@pytest.fixture
def no_accelerator(sim_state):
    runtime.sim_enable(False)
    if runtime.available():
        pytest.skip("minidl sees a GPU here")
    if torch.accelerator.is_available() or torch.accelerator.current_accelerator() is not None:
        pytest.skip("this torch build has an accelerator")


def outcome(fn, *args):
    """(value, None) or (None, (exception type name, message)), with the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn(*args), None
        except Exception as e:  # noqa: BLE001
            result = None, (type(e).__name__, str(e))
    return result, [(w.category, str(w.message)) for w in caught]


# ----------------------------------------------------------------------------- accelerator
def test_accelerator_lists_torchs_functions():
    ours = set(acc.__all__)
    assert ours == set(torch.accelerator.__all__)
    assert all(callable(getattr(acc, name)) for name in ours)


def test_accelerator_without_one_answers_as_torch(no_accelerator):
    assert acc.is_available() is torch.accelerator.is_available() is False
    assert acc.current_accelerator() is torch.accelerator.current_accelerator() is None
    assert acc.current_accelerator(check_available=True) is None
    assert acc.device_count() == torch.accelerator.device_count() == 0
    assert minidl.cuda.is_available() is False
    calls = [("current_device_index", ()), ("current_device_idx", ()), ("set_device_index", (0,)),
             ("set_device_index", (None,)), ("set_device_index", (-1,)), ("set_device_idx", (0,)),
             ("synchronize", ()), ("synchronize", (0,)), ("synchronize", ("cpu",)), ("synchronize", ("cuda",)),
             ("memory_allocated", ()), ("memory_allocated", ("cuda",)), ("max_memory_allocated", ()),
             ("memory_stats", ()), ("reset_peak_memory_stats", ()), ("empty_cache", ()), ("memory_reserved", ()),
             ("max_memory_reserved", ()), ("reset_accumulated_memory_stats", ()), ("empty_host_cache", ()),
             ("get_memory_info", ()), ("get_device_capability", ()), ("current_stream", ()),
             ("current_stream", (0,)), ("Graph", ())]
    for name, args in calls:
        ours, theirs = outcome(getattr(acc, name), *args), outcome(getattr(torch.accelerator, name), *args)
        assert ours == theirs, (name, args)
    with acc.device_index(None), torch.accelerator.device_index(None):
        pass
    for module in (acc, torch.accelerator):
        with pytest.raises(RuntimeError, match="Cannot access accelerator device when none is available."):
            with module.device_index(0):
                pass


def test_accelerator_on_the_simulator_answers_as_minidl_cuda(sim_state):
    sim_cuda_device()
    assert acc.is_available() is minidl.cuda.is_available() is True
    assert acc.current_accelerator() == acc.current_accelerator(True) == minidl.device("cuda")
    assert acc.current_accelerator().type == "cuda"
    assert acc.device_count() == minidl.cuda.device_count() == 1
    assert acc.current_device_index() == minidl.cuda.current_device() == 0
    with pytest.warns(FutureWarning, match="Use `current_device_index` instead."):
        assert acc.current_device_idx() == 0
    acc.set_device_index(0)
    acc.set_device_index("cuda:0")
    acc.set_device_index(-1)  # a no-op, as torch's
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        acc.set_device_index(3)
    with pytest.raises(ValueError, match="cpu doesn't match the current accelerator"):
        acc.set_device_index("cpu")
    with acc.device_index(0):
        assert acc.current_device_index() == 0
    with acc.device_index(None):
        pass
    x = minidl.ones(256, device="cuda")
    acc.synchronize()
    acc.synchronize(0)
    acc.synchronize("cuda")
    assert acc.memory_allocated() == minidl.cuda.memory_allocated() >= x.numel() * 4
    assert acc.max_memory_allocated("cuda:0") >= acc.memory_allocated()
    stats = acc.memory_stats()
    assert stats["allocated_bytes.all.current"] == acc.memory_allocated()
    assert acc.memory_reserved() == minidl.cuda.memory_reserved() >= acc.memory_allocated()  # the sim caches none
    assert acc.max_memory_reserved() >= acc.memory_reserved() == stats["reserved_bytes.all.current"]
    free, total = acc.get_memory_info()
    assert 0 < free <= total == minidl.cuda.mem_get_info()[1]
    assert acc.get_device_capability()["supported_dtypes"] >= {minidl.float32, minidl.int64, minidl.bool}
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == minidl.cuda.max_memory_allocated()
    acc.reset_accumulated_memory_stats()
    acc.empty_host_cache()
    acc.empty_cache()
    assert x.is_cuda and not x.is_cpu and x.cpu().is_cpu


# ----------------------------------------------------------------------------- device predicates
def test_device_predicates_are_torchs():
    names = {n for n in dir(torch.Tensor) if n.startswith("is_")}
    assert names - OTHER_PREDICATES == set(DEVICE_PREDICATES)
    for values in ([1.0, 2.0], [[1, 2]], 3.5):
        ours, theirs = minidl.tensor(values), torch.tensor(values)
        for name in DEVICE_PREDICATES:
            assert getattr(ours, name) is getattr(theirs, name), name
        assert getattr(ours[..., None], "is_cpu") is True


def test_is_cuda_on_a_simulator_tensor(sim_state):
    sim_cuda_device()
    x = minidl.zeros(2, device="cuda")
    assert [n for n in DEVICE_PREDICATES if getattr(x, n)] == ["is_cuda"]


# ----------------------------------------------------------------------------- dropout
def check_mask(out, inp, p, shared_dims):
    """out is inp times a 0-or-1/(1-p) mask constant along ``shared_dims``; answers the mask."""
    out, inp = np.asarray(out), np.asarray(inp)
    ratio = out / inp
    zero = ratio == 0.0
    assert np.all(zero | np.isclose(ratio, 1.0 / (1.0 - p), rtol=1e-5))
    if shared_dims:  # a channel's elements are all zeroed or all kept
        assert np.all(zero == zero.all(axis=shared_dims, keepdims=True))
    return np.where(zero, 0.0, 1.0)


def torch_warnings(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args, **kwargs)
    return [(w.category, str(w.message)) for w in caught]


def minidl_warnings(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args, **kwargs)
    assert all(w.filename == __file__ for w in caught)  # they point at the caller, as torch's
    return [(w.category, str(w.message)) for w in caught]


@pytest.mark.parametrize("shape,shared", [((40, 30), ()), ((6, 20, 7), (2,)), ((4, 20, 3, 5), (2, 3)),
                                          ((2, 10, 2, 3, 2), (2, 3, 4))])
def test_dropout2d_mask_structure_and_warnings(shape, shared):
    minidl.manual_seed(0)
    data = np.random.default_rng(0).uniform(1.0, 2.0, shape).astype(np.float32)
    x, t = minidl.tensor(data), torch.tensor(data)
    ours = minidl_warnings(F.dropout2d, x, 0.4)
    theirs = torch_warnings(TF.dropout2d, t, 0.4)
    assert ours == theirs and all(c is UserWarning for c, _ in ours)
    assert len(ours) == (0 if len(shape) == 4 else 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, tout = F.dropout2d(x, 0.4), TF.dropout2d(t, 0.4)
        mout = nn.Dropout2d(0.4)(x)
    for result in (out.numpy(), tout.numpy(), mout.numpy()):
        mask = check_mask(result, data, 0.4, shared)
        assert 0 < (mask == 0).mean() < 1
    if not shared:  # 2-D: single elements, so some rows are part zeroed, part kept
        zeros = out.numpy() == 0
        assert np.any(zeros.any(1) & ~zeros.all(1))


def test_dropout2d_warning_texts():
    two_d = ("dropout2d: Received a 2-D input to dropout2d, which is deprecated and will result in an error in a "
             "future release. To retain the behavior and silence this warning, please use dropout instead. Note that "
             "dropout2d exists to provide channel-wise dropout on inputs with 2 spatial dimensions, a channel "
             "dimension, and an optional batch dimension (i.e. 3D or 4D inputs).")
    three_d = ("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior is "
               "desired - input is interpreted as shape (N, C, L)")
    for module in (F, TF):
        lib = minidl if module is F else torch
        with pytest.warns(UserWarning, match=re.escape(two_d)):
            module.dropout2d(lib.ones(3, 4))
        with pytest.warns(UserWarning, match=re.escape(three_d)):
            module.dropout2d(lib.ones(2, 3, 4))
    with pytest.warns(UserWarning, match=re.escape(three_d)):
        nn.Dropout2d()(minidl.ones(2, 3, 4))


def test_dropout2d_edges_and_errors():
    x = minidl.tensor(np.random.default_rng(1).uniform(1, 2, (2, 3, 4, 4)).astype(np.float32))
    assert F.dropout2d(x, 0.5, training=False) is x
    assert F.dropout2d(x, 0.0) is x
    assert np.array_equal(F.dropout2d(x, 1.0).numpy(), np.zeros((2, 3, 4, 4), np.float32))
    m = nn.Dropout2d(0.7).eval()
    assert m(x) is x
    y = x.clone()
    assert F.dropout2d(y, 1.0, inplace=True) is y and float(y.sum()) == 0.0
    for p in (-0.1, 1.5):
        ours = outcome(F.dropout2d, x, p)
        assert ours == outcome(TF.dropout2d, torch.tensor(x.numpy()), p)
        assert ours[0][1][0] == "ValueError"
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got"):
            nn.Dropout2d(p)
    for shape in ((5,), ()):  # warned about, then refused, as torch does
        ours = outcome(F.dropout2d, minidl.ones(shape), 0.5)
        assert ours == outcome(TF.dropout2d, torch.ones(shape), 0.5)
        assert ours[0][1] == ("RuntimeError", "Feature dropout requires at least 2 dimensions in the input")


def test_dropout2d_gradient_is_the_mask():
    minidl.manual_seed(3)
    x = minidl.ones(3, 8, 2, 2, requires_grad=True)
    out = F.dropout2d(x, 0.5)
    out.sum().backward()
    assert np.array_equal(x.grad.numpy(), out.detach().numpy())


@pytest.mark.parametrize("name,shape,shared", [
    ("dropout1d", (6, 20, 5), (2,)), ("dropout1d", (20, 5), (1,)),
    ("dropout3d", (2, 10, 2, 3, 2), (2, 3, 4)), ("dropout3d", (20, 2, 3, 2), (1, 2, 3)),
    ("dropout3d", (20, 4, 3), (1, 2)), ("dropout3d", (20, 4), (1,)),
])
def test_dropout1d_3d_as_torch(name, shape, shared):
    minidl.manual_seed(0)
    data = np.random.default_rng(0).uniform(1.0, 2.0, shape).astype(np.float32)
    ours = minidl_warnings(getattr(F, name), minidl.tensor(data), 0.4)
    assert ours == torch_warnings(getattr(TF, name), torch.tensor(data), 0.4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = getattr(F, name)(minidl.tensor(data), 0.4).numpy()
        tout = getattr(TF, name)(torch.tensor(data), 0.4).numpy()
        module = {"dropout1d": nn.Dropout1d, "dropout3d": nn.Dropout3d}[name]
        mout = module(0.4)(minidl.tensor(data)).numpy()
    for result in (out, tout, mout):
        assert result.shape == shape
        mask = check_mask(result, data, 0.4, shared)
        assert 0 < (mask == 0).mean() < 1
    x, y = minidl.tensor(data), minidl.tensor(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.array_equal(module(0.4).eval()(x).numpy(), data)
        assert getattr(F, name)(y, 1.0, inplace=True) is y
    assert float(y.sum()) == 0.0


def test_dropout1d_refuses_other_dims():
    for shape in ((4,), (2, 3, 4, 5)):
        ours = outcome(F.dropout1d, minidl.ones(shape), 0.5)
        assert ours == outcome(TF.dropout1d, torch.ones(shape), 0.5)
        assert ours[0][1][0] == "RuntimeError"
