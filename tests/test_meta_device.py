"""The meta device (shapes, dtypes and strides without data), the default device (``with minidl.device(...)``,
``set_default_device``) and ``nn.Module.to_empty``, checked against torch's: the same constructions give the same
shapes, dtypes, strides, reprs and errors, and a model built on 'meta' then materialised and reset under a seed
equals the one built directly under that seed."""
import copy
import pickle
import threading
import warnings

import numpy as np
import pytest

import minidl
from minidl import nn

torch = pytest.importorskip("torch")


def sig(t):
    """What a meta tensor has: shape, dtype, strides, device type."""
    return tuple(t.shape), str(t.dtype).split(".")[-1], tuple(t.stride()), t.device.type


def both(make):
    """``make(lib)`` with lib minidl, then torch."""
    return make(minidl), make(torch)


# ----------------------------------------------------------------------------- the device
def test_meta_device_parses_as_torch():
    for spec in ("meta", "meta:0"):
        assert repr(minidl.device(spec)) == repr(torch.device(spec))
        assert str(minidl.device(spec)) == str(torch.device(spec))
    assert minidl.device("meta").type == "meta" and minidl.device("meta").index is None
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda, meta device type at start of device string: "
                                           "Meta"):
        minidl.device("Meta")
    with pytest.raises(RuntimeError, match="device type at start of device string: Meta"):
        torch.device("Meta")
    assert minidl.empty(2, device="meta:1").device == minidl.device("meta")   # (no index, as torch's tensors)
    assert torch.empty(2, device="meta:1").device == torch.device("meta")


FACTORIES = {
    "empty": lambda L: L.empty(3, 4, device="meta"),
    "zeros-int": lambda L: L.zeros(2, 3, dtype=L.int64, device="meta"),
    "ones": lambda L: L.ones((2, 1, 3), device="meta"),
    "full": lambda L: L.full((2, 2), 7.0, device="meta"),
    "randn": lambda L: L.randn(5, device="meta"),
    "rand-f64": lambda L: L.rand(2, 3, dtype=L.float64, device="meta"),
    "randint": lambda L: L.randint(0, 5, (4,), device="meta"),
    "randperm": lambda L: L.randperm(6, device="meta"),
    "arange": lambda L: L.arange(2, 11, 3, device="meta"),
    "arange-float": lambda L: L.arange(0.0, 1.0, 0.25, device="meta"),
    "linspace": lambda L: L.linspace(0, 1, 5, device="meta"),
    "logspace": lambda L: L.logspace(0, 2, 3, device="meta"),
    "eye": lambda L: L.eye(3, 2, device="meta"),
    "tensor": lambda L: L.tensor([[1, 2], [3, 4]], device="meta"),
    "scalar_tensor": lambda L: L.scalar_tensor(2.5, device="meta"),
    "tril_indices": lambda L: L.tril_indices(3, 3, device="meta"),
    "empty_like": lambda L: L.empty_like(L.ones(2, 3), device="meta"),
    "zeros_like-of-meta": lambda L: L.zeros_like(L.empty(2, 3, device="meta")),
    "full_like": lambda L: L.full_like(L.empty(4, device="meta"), 3),
    "to-meta": lambda L: L.ones(3, 2).to("meta"),
    "new_empty": lambda L: L.empty(2, device="meta").new_empty((3,)),
    "0-d": lambda L: L.zeros((), device="meta"),
    "empty-size": lambda L: L.zeros(0, 3, device="meta"),
}


@pytest.mark.parametrize("name", FACTORIES)
def test_factories_make_meta_tensors_as_torch(name):
    got, want = both(FACTORIES[name])
    assert sig(got) == sig(want)
    assert got.is_meta and got.data_ptr() == 0 and got.untyped_storage().nbytes() == want.untyped_storage().nbytes()


def _x(L):
    return L.empty(3, 4, device="meta", requires_grad=True)


OPS = {
    "t": lambda L: _x(L).t(),
    "view": lambda L: _x(L).view(2, 6),
    "slice": lambda L: _x(L)[1:, ::2],
    "permute-contiguous": lambda L: _x(L).t().contiguous(),
    "expand": lambda L: L.empty(3, 1, device="meta").expand(3, 5),
    "matmul": lambda L: _x(L) @ L.empty(4, 5, device="meta"),
    "bmm": lambda L: L.empty(2, 3, 4, device="meta") @ L.empty(2, 4, 6, device="meta"),
    "add-broadcast": lambda L: _x(L) + L.empty(4, device="meta"),
    "mul-number": lambda L: _x(L) * 2,
    "int-promotion": lambda L: L.empty(3, dtype=L.int64, device="meta") / 2,
    "compare": lambda L: _x(L) > 0,
    "sum-dim": lambda L: _x(L).sum(1),
    "mean-keepdim": lambda L: _x(L).mean(0, keepdim=True),
    "max": lambda L: _x(L).max(),
    "softmax": lambda L: _x(L).softmax(-1),
    "cat": lambda L: L.cat([_x(L), _x(L)], 1),
    "linear": lambda L: L.nn.functional.linear(_x(L), L.empty(5, 4, device="meta"), L.empty(5, device="meta")),
    "conv2d": lambda L: L.nn.functional.conv2d(L.empty(2, 3, 8, 8, device="meta"), L.empty(4, 3, 3, 3, device="meta"),
                                               padding=1, stride=2),
    "max_pool2d-padded": lambda L: L.nn.functional.max_pool2d(L.empty(1, 2, 7, 7, device="meta"), 3, 2, 1),
    "embedding": lambda L: L.nn.functional.embedding(L.zeros(2, 3, dtype=L.int64, device="meta"),
                                                     L.empty(10, 4, device="meta")),
    "layer_norm": lambda L: L.nn.functional.layer_norm(_x(L), (4,)),
    "inv": lambda L: L.linalg.inv(L.empty(2, 3, 3, device="meta")),
    "to-float64": lambda L: _x(L).to(L.float64),
    "detach": lambda L: _x(L).detach(),
    "clone": lambda L: _x(L).clone(),
    "sort-indices": lambda L: _x(L).sort(1)[1],
    "backward-grad": lambda L: _grad(L),
}


def _grad(L):
    x = _x(L)
    (x.t() @ L.empty(3, 2, device="meta")).relu().sum().backward()
    return x.grad


ROW_MAJOR = {"inv"}   # (minidl's linalg results are row-major on every device, torch's column-major)


@pytest.mark.parametrize("name", OPS)
def test_ops_on_meta_give_torch_shapes_dtypes_and_strides(name):
    got, want = both(OPS[name])
    if name in ROW_MAJOR:
        assert got.is_contiguous() and sig(got)[:2] + sig(got)[3:] == sig(want)[:2] + sig(want)[3:]
    else:
        assert sig(got) == sig(want)
    assert got.requires_grad == want.requires_grad and (got.grad_fn is None) == (want.grad_fn is None)


FILLS = {
    "uniform_": lambda L, t: t.uniform_(-1, 1),
    "normal_": lambda L, t: t.normal_(),
    "zero_": lambda L, t: t.zero_(),
    "fill_": lambda L, t: t.fill_(3),
    "copy_-from-cpu": lambda L, t: t.copy_(L.ones(4, 5)),
    "setitem": lambda L, t: t.__setitem__(0, 1.0) or t,
    "kaiming_uniform_": lambda L, t: L.nn.init.kaiming_uniform_(t, a=5 ** 0.5),
    "kaiming_normal_": lambda L, t: L.nn.init.kaiming_normal_(t),
    "xavier_uniform_": lambda L, t: L.nn.init.xavier_uniform_(t),
    "xavier_normal_": lambda L, t: L.nn.init.xavier_normal_(t),
    "trunc_normal_": lambda L, t: L.nn.init.trunc_normal_(t, std=0.02),
    "constant_": lambda L, t: L.nn.init.constant_(t, 0.5),
    "ones_": lambda L, t: L.nn.init.ones_(t),
}


@pytest.mark.parametrize("name", FILLS)
def test_fills_keep_the_meta_tensor_and_draw_nothing(name):
    for L in (minidl, torch):
        t = L.empty(4, 5, device="meta")
        L.manual_seed(3)
        assert FILLS[name](L, t) is t and t.is_meta
        after = L.rand(3)
        L.manual_seed(3)
        assert L.equal(after, L.rand(3)), L.__name__   # (the generator did not move)


def test_parameter_of_meta_tensor():
    got, want = both(lambda L: L.nn.Parameter(L.empty(3, 2, device="meta")))
    assert isinstance(got, nn.Parameter) and got.requires_grad and got.is_leaf
    assert sig(got) == sig(want) and repr(got) == repr(want).replace("torch.", "minidl.")
    got.requires_grad_(False)
    assert not got.requires_grad


# ----------------------------------------------------------------------------- no data
def _s0(L):
    return L.zeros((), device="meta")


NO_DATA = {
    "to-cpu": (lambda L: L.empty(2, device="meta").to("cpu"), NotImplementedError, "Cannot copy out of meta tensor; "
                                                                                    "no data!"),
    "cpu": (lambda L: L.empty(2, device="meta").cpu(), NotImplementedError, "Cannot copy out of meta tensor"),
    "tolist": (lambda L: L.empty(2, device="meta").tolist(), NotImplementedError, "Cannot copy out of meta tensor"),
    "copy_-into-cpu": (lambda L: L.zeros(2).copy_(L.empty(2, device="meta")), NotImplementedError,
                       "Cannot copy out of meta tensor"),
    "item": (lambda L: _s0(L).item(), RuntimeError, r"Tensor\.item\(\) cannot be called on meta tensors"),
    "float": (lambda L: float(_s0(L)), RuntimeError, r"Tensor\.item\(\) cannot be called on meta tensors"),
    "bool": (lambda L: bool(_s0(L)), RuntimeError, r"Tensor\.item\(\) cannot be called on meta tensors"),
    "numpy": (lambda L: L.empty(2, device="meta").numpy(), TypeError, "can't convert meta device type tensor to numpy"),
    "nonzero": (lambda L: L.empty(2, device="meta").nonzero(), NotImplementedError, "nonzero"),
    "dlpack": (lambda L: L.empty(2, device="meta").__dlpack__(), BufferError, "Cannot pack tensors on meta"),
    "dlpack_device": (lambda L: L.empty(2, device="meta").__dlpack_device__(), ValueError,
                      "Unknown device type meta for Dlpack"),
    "share_memory_": (lambda L: L.empty(2, device="meta").share_memory_(), RuntimeError, "only available on CPU"),
}


@pytest.mark.parametrize("name", NO_DATA)
def test_what_would_read_data_raises_torch_error(name):
    make, error, message = NO_DATA[name]
    for L in (minidl, torch):
        with pytest.raises(error, match=message):
            make(L)


def test_meta_repr_as_torch():
    cases = [lambda L: L.empty(3, 4, device="meta"), lambda L: L.zeros(3, dtype=L.int64, device="meta"),
             lambda L: L.zeros((), device="meta"), lambda L: L.zeros(0, device="meta"),
             lambda L: L.zeros(2, dtype=L.bool, device="meta"), lambda L: L.zeros(2, device="meta", requires_grad=True),
             lambda L: L.zeros(2, device="meta", requires_grad=True) * 2]
    for make in cases:
        got, want = both(make)
        assert repr(got) == repr(want).replace("torch.", "minidl.")
        assert str(got) == repr(got) and format(got) == repr(got)


def test_meta_tensors_pickle_and_deepcopy_without_data():
    t = minidl.empty(2, 3, device="meta")
    for copied in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t), copy.deepcopy(nn.Parameter(t))):
        assert sig(copied) == sig(t)


# ----------------------------------------------------------------------------- the default device
DEFAULTED = {
    "empty": lambda L: L.empty(2), "zeros": lambda L: L.zeros(2), "ones": lambda L: L.ones(2),
    "full": lambda L: L.full((2,), 1.0), "rand": lambda L: L.rand(2), "randn": lambda L: L.randn(2),
    "randint": lambda L: L.randint(3, (2,)), "randperm": lambda L: L.randperm(3), "arange": lambda L: L.arange(3),
    "linspace": lambda L: L.linspace(0, 1, 3), "logspace": lambda L: L.logspace(0, 1, 3), "eye": lambda L: L.eye(2),
    "tensor": lambda L: L.tensor([1.0]), "tensor-of-cpu-tensor": lambda L: L.tensor(L.ones(2, device="cpu")),
    "as_tensor": lambda L: L.as_tensor(np.ones(2)), "scalar_tensor": lambda L: L.scalar_tensor(1),
    "tril_indices": lambda L: L.tril_indices(3, 3),
    "sparse_coo_tensor": lambda L: L.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (3,)),
}
LEFT_BE = {   # what the default device leaves be, in torch as here
    "zeros_like": lambda L: L.zeros_like(L.ones(2, device="cpu")),
    "rand_like": lambda L: L.rand_like(L.ones(2, device="cpu")),
    "from_numpy": lambda L: L.from_numpy(np.ones(2)),
    "normal": lambda L: L.normal(0.0, 1.0, (2,)),
    "legacy": lambda L: L.Tensor(2, 3),
    "new_zeros": lambda L: L.ones(2, device="cpu").new_zeros(3),
    "op-result": lambda L: L.ones(2, device="cpu") + 1,
}


@pytest.mark.parametrize("name", list(DEFAULTED) + list(LEFT_BE))
def test_device_context_is_factories_default_as_torch(name):
    make = DEFAULTED.get(name) or LEFT_BE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (torch's, on tensor(a_tensor))
        for L in (minidl, torch):
            with L.device("meta"):
                assert L.get_default_device() == L.device("meta")
                assert make(L).device.type == ("meta" if name in DEFAULTED else "cpu"), L.__name__
    assert make(minidl).device.type == "cpu"


def test_device_context_nests_restores_and_is_per_thread():
    seen = {}
    for L in (minidl, torch):
        with L.device("meta") as d:
            assert repr(d) == "device(type='meta')"
            with L.device("cpu"):
                inner = L.zeros(1).device.type
            after = L.zeros(1).device.type
            other = []
            thread = threading.Thread(target=lambda: other.append(L.zeros(1).device.type))
            thread.start()
            thread.join()
        with pytest.raises(ValueError):
            with L.device("meta"):
                raise ValueError
        seen[L] = (inner, after, other, L.zeros(1).device.type, str(L.get_default_device()))
    assert seen[minidl] == seen[torch] == ("cpu", "meta", ["cpu"], "cpu", "cpu")


def test_set_default_device_as_torch():
    seen = {}
    for L in (minidl, torch):
        try:
            L.set_default_device("meta")
            other = []
            thread = threading.Thread(target=lambda: other.append(str(L.get_default_device())))
            thread.start()
            thread.join()
            with L.device("cpu"):
                inside = L.zeros(1).device.type
            state = (str(L.get_default_device()), L.ones(2).device.type, inside, L.zeros(1).device.type, other)
        finally:
            L.set_default_device(None)
        seen[L] = state + (str(L.get_default_device()), L.zeros(1).device.type)
    assert seen[minidl] == seen[torch] == ("meta", "meta", "cpu", "meta", ["cpu"], "cpu", "cpu")


def test_module_built_under_meta_is_meta():
    shapes = {}
    for L in (minidl, torch):
        with L.device("meta"):
            m = L.nn.Sequential(L.nn.Conv2d(3, 8, 3), L.nn.BatchNorm2d(8), L.nn.Flatten(), L.nn.Linear(8 * 36, 4),
                                L.nn.LayerNorm(4), L.nn.Embedding(5, 2), L.nn.LSTM(2, 3))
        assert all(isinstance(p, L.nn.Parameter) and p.requires_grad for p in m.parameters())
        shapes[L] = {k: sig(v) for k, v in m.state_dict().items()}
    assert shapes[minidl] == shapes[torch] and all(s[3] == "meta" for s in shapes[minidl].values())


# ----------------------------------------------------------------------------- to_empty
def _reset(module):
    """Every reset of ``module``'s tree, children first: the order construction ran them in."""
    for child in module.children():
        _reset(child)
    for name in ("reset_parameters", "_reset_parameters"):
        if hasattr(type(module), name):
            getattr(module, name)()


MODELS = {
    "mlp": lambda: nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 3, bias=False)),
    "convolutions": lambda: nn.ModuleList([nn.Conv1d(2, 3, 3), nn.Conv2d(3, 4, 3, groups=1), nn.Conv3d(2, 2, 2),
                                           nn.ConvTranspose1d(3, 2, 2), nn.ConvTranspose2d(4, 2, 2, groups=2),
                                           nn.ConvTranspose3d(2, 2, 2)]),
    "norms": lambda: nn.ModuleList([nn.BatchNorm1d(3), nn.BatchNorm2d(4, affine=False), nn.BatchNorm3d(2),
                                    nn.GroupNorm(1, 2), nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
                                    nn.LayerNorm(4), nn.RMSNorm(4)]),
    "embeddings": lambda: nn.ModuleList([nn.Embedding(10, 4, padding_idx=0), nn.EmbeddingBag(10, 4),
                                         nn.Bilinear(4, 3, 2), nn.PReLU(2)]),
    "recurrent": lambda: nn.ModuleList([nn.LSTM(4, 5, 2, bidirectional=True), nn.GRU(3, 4), nn.RNNCell(3, 2),
                                        nn.LSTMCell(3, 2), nn.GRUCell(3, 2)]),
    "attention": lambda: nn.MultiheadAttention(8, 2, add_bias_kv=True, kdim=6, vdim=5),
}


@pytest.mark.parametrize("name", MODELS)
def test_meta_model_materialised_and_reset_equals_model_built_on_cpu(name):
    with minidl.device("meta"):
        model = MODELS[name]()
    assert all(t.is_meta for t in list(model.parameters()) + list(model.buffers()))
    minidl.manual_seed(7)
    assert model.to_empty(device="cpu") is model
    _reset(model)
    minidl.manual_seed(7)
    direct = MODELS[name]()
    got, want = model.state_dict(), direct.state_dict()
    assert list(got) == list(want)
    for key in want:
        assert got[key].device.type == "cpu" and got[key].dtype is want[key].dtype
        assert minidl.equal(got[key], want[key]), key
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in model.parameters())


def test_to_empty_replaces_parameters_as_torch():
    seen = {}
    for L in (minidl, torch):
        with L.device("meta"):
            m = L.nn.Sequential(L.nn.Linear(3, 4), L.nn.BatchNorm1d(4))
        weight = m[0].weight
        weight.grad = L.zeros(4, 3, device="meta")
        m[1].weight.requires_grad_(False)
        m.to_empty(device="cpu", recurse=True)
        kept_on_cpu = m[0].weight
        m.to_empty(device="cpu")
        shallow = L.nn.Sequential(L.nn.Linear(2, 2, device="meta"))
        shallow.to_empty(device="cpu", recurse=False)
        seen[L] = (m[0].weight is weight, m[0].weight is kept_on_cpu, type(m[0].weight).__name__,
                   m[0].weight.grad.device.type, m[1].weight.requires_grad, str(m[1].num_batches_tracked.dtype),
                   m[1].running_var.device.type, shallow[0].weight.device.type)
        with pytest.raises(TypeError, match="positional argument"):
            m.to_empty("cpu")
    assert seen[minidl][:5] == seen[torch][:5] == (False, True, "Parameter", "cpu", False)
    assert seen[minidl][5:] == ("minidl.int64", "cpu", "meta") and seen[torch][5:] == ("torch.int64", "cpu", "meta")


def test_module_to_on_meta_recommends_to_empty():
    for L in (minidl, torch):
        with L.device("meta"):
            m = L.nn.Linear(2, 3)
        with pytest.raises(NotImplementedError, match=r"no data! Please use .*nn\.Module\.to_empty\(\) instead of "
                                                      r".*nn\.Module\.to\(\) when moving module from meta"):
            m.to("cpu")
        with pytest.raises(NotImplementedError, match="no data!$"):
            m.cpu()
        assert m.to(L.float64).weight.dtype == L.float64 and m.weight.is_meta


def test_load_state_dict_into_meta():
    with minidl.device("meta"):
        m = nn.Linear(2, 3)
    state = nn.Linear(2, 3).state_dict()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m.load_state_dict(state)
    assert [str(w.message).split(":")[0] for w in caught] == ["for weight", "for bias"]
    assert all("copying from a non-meta parameter in the checkpoint to a meta parameter in the current model, which "
               "is a no-op" in str(w.message) for w in caught)
    assert m.weight.is_meta
    m.load_state_dict(state, assign=True)
    assert minidl.equal(m.weight, state["weight"]) and isinstance(m.weight, nn.Parameter) and m.weight.requires_grad


def test_meta_forward_and_backward_of_a_model():
    with minidl.device("meta"):
        net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                            nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
        loss = nn.functional.cross_entropy(net(minidl.randn(2, 3, 8, 8)), minidl.zeros(2, dtype=minidl.int64))
    loss.backward()
    assert sig(loss) == ((), "float32", (), "meta")
    assert all(p.grad is not None and sig(p.grad) == sig(p.detach()) for p in net.parameters())


def test_compile_runs_meta_calls_eagerly():
    double = minidl.compile(lambda x: (x * 2).sum(0))
    x = minidl.empty(3, 4, device="meta")
    assert [sig(double(x)) for _ in range(2)] == [((4,), "float32", (1,), "meta")] * 2
    with pytest.raises(minidl.compiler.GraphBreakError, match="an op runs on meta tensors"):
        minidl.compile(lambda x: x * 2, fullgraph=True)(x)


def test_library_tensors_made_inside_a_meta_context_stay_on_their_device():
    params = [minidl.nn.Parameter(minidl.tensor([3.0, 4.0]))]
    params[0].grad = minidl.tensor([1.0, 1.0])
    with minidl.device("meta"):   # (the optimizer's step count is host state, as torch's)
        opt = minidl.optim.AdamW(params, lr=0.1)
        opt.step()
    assert str(opt.state[params[0]]["step"].device) == "cpu"
    assert str(params[0].device) == "cpu" and params[0].detach().numpy().tolist() != [3.0, 4.0]


@pytest.mark.parametrize("call, error", [("eye(-1)", RuntimeError), ("eye(2.5)", TypeError),
                                         ("randperm(-2)", RuntimeError), ("randint(5, 2, (2,))", RuntimeError),
                                         ("logspace(0, 1, -2)", RuntimeError)])
def test_meta_factories_check_their_arguments_as_torchs_do(call, error):
    torch = pytest.importorskip("torch")
    factory, arguments = call.split("(", 1)
    with pytest.raises(error):
        eval(f"minidl.{factory}({arguments[:-1]}, device='meta')", {"minidl": minidl})
    with pytest.raises(error):
        eval(f"torch.{factory}({arguments[:-1]}, device='meta')", {"torch": torch})


def test_writing_a_meta_value_into_a_cpu_tensor_names_the_missing_data():
    target = minidl.zeros(4)
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor; no data!"):
        target[0:2] = minidl.ones(2, device="meta")
