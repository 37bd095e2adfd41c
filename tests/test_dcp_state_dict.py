"""minidl.dist.checkpoint.state_dict against torch.distributed.checkpoint.state_dict: the same model and
optimizers in both, a step or two on the same data, then the FQN-keyed dicts compared key by key (plain,
DDP-wrapped on sim ranks, compiled, flattened, frozen parameters, cpu_offload, several optimizers); a get ->
set round trip that continues as the original run does; rank 0's dict broadcast to sim ranks."""
import warnings

import numpy as np
import pytest

import minidl
import minidl.dist as dist
from minidl.dist.checkpoint import state_dict as dsd
from minidl.nn.parallel import DistributedDataParallel

torch = pytest.importorskip("torch")
tsd = pytest.importorskip("torch.distributed.checkpoint.state_dict")

X = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)


def build(lib, seed=0):
    """Linear -> Tanh -> BatchNorm (buffers) -> a nested Sequential of two Linears."""
    nn = lib.nn
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.BatchNorm1d(4),
                          nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)))
    weights = build_weights(seed)
    with lib.no_grad():
        for name, t in model.state_dict().items():
            t.copy_(lib.tensor(weights[name]))
    return model


def build_weights(seed):
    rng = np.random.default_rng(seed)
    shapes = {"0.weight": (4, 3), "0.bias": (4,), "2.weight": (4,), "2.bias": (4,), "2.running_mean": (4,),
              "2.running_var": (4,), "3.0.weight": (4, 4), "3.0.bias": (4,), "3.1.weight": (2, 4), "3.1.bias": (2,)}
    weights = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    weights["2.running_var"] = np.abs(weights["2.running_var"]) + 0.5
    weights["2.num_batches_tracked"] = np.array(0)
    return weights


def make_optimizers(lib, model, kind):
    """One optimizer, or two splitting the parameters (the several-optimizers case)."""
    optim = lib.optim
    params = list(model.parameters())
    if kind == "adam":
        return [optim.Adam(params, lr=0.05)]
    if kind == "adamw_groups":
        return [optim.AdamW([{"params": params[:2], "lr": 0.02}, {"params": params[2:]}], lr=0.05,
                            weight_decay=0.1)]
    if kind == "sgd":
        return [optim.SGD(params, lr=0.1, momentum=0.9)]
    if kind == "sgd_plain":
        return [optim.SGD(params, lr=0.1)]
    if kind == "two":
        return [optim.Adam(params[:4], lr=0.05), optim.SGD(params[4:], lr=0.1, momentum=0.5)]
    raise ValueError(kind)


def train(lib, model, optimizers, steps):
    x = lib.tensor(X)
    for _ in range(steps):
        for o in optimizers:
            o.zero_grad()
        model(x).pow(2).mean().backward()
        for o in optimizers:
            o.step()


def pair(kind="adam", steps=2, freeze=()):
    """The same trained model and optimizers in torch and in minidl."""
    out = []
    for lib in (torch, minidl):
        model = build(lib)
        for name in freeze:
            model.get_parameter(name).requires_grad_(False)
        optimizers = make_optimizers(lib, model, kind)
        train(lib, model, optimizers, steps)
        out.append((model, optimizers))
    return out


def assert_same(theirs, ours, path="root"):
    """Same keys in the same order, same structure, same values (tensors to float32 rounding of a few ops)."""
    if isinstance(theirs, (torch.Tensor, minidl.Tensor)):
        assert isinstance(ours, minidl.Tensor), path
        assert tuple(theirs.shape) == tuple(ours.shape), path
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=path)
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict), path
        assert list(theirs) == list(ours), path
        for k in theirs:
            assert_same(theirs[k], ours[k], f"{path}.{k}")
    elif isinstance(theirs, (list, tuple)):
        assert type(theirs) is type(ours) and len(theirs) == len(ours), path
        for i, (a, b) in enumerate(zip(theirs, ours)):
            assert_same(a, b, f"{path}[{i}]")
    else:
        assert theirs == ours, path


def options(lib_sd, **kw):
    return lib_sd.StateDictOptions(**kw)


# ---------------------------------------------------------------------------------------------- like torch
@pytest.mark.parametrize("kind", ["adam", "adamw_groups", "sgd", "sgd_plain", "two"])
def test_state_dicts_match_torch(kind):
    (tm, topt), (mm, mopt) = pair(kind)
    theirs, ours = tsd.get_state_dict(tm, topt), dsd.get_state_dict(mm, mopt)
    assert_same(theirs[0], ours[0])
    assert_same(theirs[1], ours[1])
    assert list(ours[1]["state"])[:1] == ([] if kind == "sgd_plain" else ["0.weight"])


def test_dicts_hold_the_live_tensors():
    """No copies: what dcp.load fills in place is the model's and the optimizer's own storage."""
    (_, _), (mm, mopt) = pair()
    sd, osd = dsd.get_state_dict(mm, mopt)
    with minidl.no_grad():
        sd["0.bias"].fill_(7.0)
        osd["state"]["0.bias"]["exp_avg"].fill_(3.0)
    assert (mm[0].bias.detach().numpy() == 7.0).all()
    assert (mopt[0].state[mm[0].bias]["exp_avg"].numpy() == 3.0).all()


@pytest.mark.parametrize("kind", ["adam", "sgd", "two"])
def test_a_fresh_optimizer_gets_its_state_first(kind):
    """torch steps it once with zero gradients at lr 0: every state tensor exists, nothing moved."""
    (tm, topt), (mm, mopt) = pair(kind, steps=0)
    before = {k: v.numpy().copy() for k, v in mm.state_dict().items()}   # (state_dict detaches)
    assert_same(tsd.get_optimizer_state_dict(tm, topt), dsd.get_optimizer_state_dict(mm, mopt))
    for k, v in mm.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    assert all(p.grad is None for p in mm.parameters())
    assert [g["lr"] for o in mopt for g in o.param_groups] == [g["lr"] for o in topt for g in o.param_groups]


def test_flattened_matches_torch_and_loads_back():
    (tm, topt), (mm, mopt) = pair("two")
    flat = options(dsd, flatten_optimizer_state_dict=True)
    theirs = tsd.get_optimizer_state_dict(tm, topt, options=options(tsd, flatten_optimizer_state_dict=True))
    ours = dsd.get_optimizer_state_dict(mm, mopt, options=flat)
    assert_same(theirs, ours)
    assert "state.3.1.weight.momentum_buffer" in ours and ours["param_groups.0.bias.lr"] == 0.05
    fresh = build(minidl, seed=1)
    fresh_opt = make_optimizers(minidl, fresh, "two")
    dsd.set_optimizer_state_dict(fresh, fresh_opt, ours, options=flat)
    assert_same(tsd.get_optimizer_state_dict(tm, topt), dsd.get_optimizer_state_dict(fresh, fresh_opt))


def test_frozen_parameters():
    """ignore_frozen_params drops them from the model dict; in the optimizer they have no state."""
    (tm, topt), (mm, mopt) = pair("adam", freeze=["0.weight", "3.0.bias"])
    ignore_t, ignore_m = options(tsd, ignore_frozen_params=True), options(dsd, ignore_frozen_params=True)
    theirs, ours = tsd.get_state_dict(tm, topt, options=ignore_t), dsd.get_state_dict(mm, mopt, options=ignore_m)
    assert_same(theirs, ours)
    assert "0.weight" not in ours[0] and "0.weight" not in ours[1]["state"]
    assert "0.weight" in ours[1]["param_groups"][0]["params"]
    fresh = build(minidl, seed=1)
    for name in ("0.weight", "3.0.bias"):
        fresh.get_parameter(name).requires_grad_(False)
    fresh_opt = make_optimizers(minidl, fresh, "adam")
    with pytest.raises(RuntimeError, match='Missing key'):   # as in torch: strict wants the frozen ones too
        dsd.set_state_dict(fresh, fresh_opt, model_state_dict=ours[0], optim_state_dict=ours[1])
    keys = dsd.set_state_dict(fresh, fresh_opt, model_state_dict=ours[0], optim_state_dict=ours[1],
                              options=options(dsd, strict=False))
    assert sorted(keys.missing_keys) == ["0.weight", "3.0.bias"]
    assert_same(theirs[1], dsd.get_optimizer_state_dict(fresh, fresh_opt))


def test_cpu_offload_and_full_state_dict():
    (tm, topt), (mm, mopt) = pair("sgd")
    for kw in ({"cpu_offload": True}, {"full_state_dict": True}, {"cpu_offload": True, "full_state_dict": True}):
        theirs = tsd.get_state_dict(tm, topt, options=options(tsd, **kw))
        ours = dsd.get_state_dict(mm, mopt, options=options(dsd, **kw))
        assert_same(theirs, ours)
        assert all(t.device == minidl.device("cpu") for t in ours[0].values())


def test_submodules_warn_and_filter_as_torch():
    (tm, _), (mm, _) = pair()
    for keep in (True, False):
        with pytest.warns(FutureWarning, match="deprecated") as caught:
            ours = dsd.get_model_state_dict(mm, submodules={mm[3]},
                                            options=options(dsd, keep_submodule_prefixes=keep))
        assert caught[0].filename == __file__   # the warning points at the caller
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            theirs = tsd.get_model_state_dict(tm, submodules={tm[3]},
                                              options=options(tsd, keep_submodule_prefixes=keep))
        assert_same(theirs, ours)


def test_full_state_dict_load_keeps_what_the_dict_lacks():
    """torch fills a key missing from a full_state_dict load with the model's own value."""
    (tm, _), (mm, _) = pair()
    for lib, lib_sd, model in ((torch, tsd, tm), (minidl, dsd, mm)):
        sd = {k: v for k, v in lib_sd.get_model_state_dict(model).items() if k != "3.1.bias"}
        full = options(lib_sd, full_state_dict=True)
        assert not any(lib_sd.set_model_state_dict(model, dict(sd), options=full))  # (torch's fills the dict in)
        with pytest.raises(RuntimeError, match="Missing key"):
            lib_sd.set_model_state_dict(model, dict(sd))


# ---------------------------------------------------------------------------------------------- round trip
@pytest.mark.parametrize("kind", ["adam", "two"])
def test_round_trip_then_one_more_step_equals_continuing(kind):
    (tm, topt), (mm, mopt) = pair(kind)
    sd, osd = dsd.get_state_dict(mm, mopt)
    fresh = build(minidl, seed=1)
    fresh_opt = make_optimizers(minidl, fresh, kind)
    assert not any(dsd.set_state_dict(fresh, fresh_opt, model_state_dict=sd, optim_state_dict=osd))
    for lib, model, optimizers in ((torch, tm, topt), (minidl, mm, mopt), (minidl, fresh, fresh_opt)):
        train(lib, model, optimizers, 1)
    theirs = tsd.get_state_dict(tm, topt)
    assert_same(theirs, dsd.get_state_dict(mm, mopt))
    assert_same(theirs, dsd.get_state_dict(fresh, fresh_opt))


def test_a_plain_optimizer_state_dict_loads_as_it_is():
    (_, _), (mm, mopt) = pair()
    fresh = build(minidl, seed=1)
    fresh_opt = make_optimizers(minidl, fresh, "adam")
    dsd.set_optimizer_state_dict(fresh, fresh_opt, mopt[0].state_dict())
    assert_same(dsd.get_optimizer_state_dict(mm, mopt), dsd.get_optimizer_state_dict(fresh, fresh_opt))


def test_compiled_module_names_have_no_prefix():
    (tm, _), (mm, mopt) = pair()
    compiled = minidl.compile(mm)
    assert list(compiled.state_dict())[0] == "_orig_mod.0.weight"
    sd, osd = dsd.get_state_dict(compiled, mopt)
    assert_same(tsd.get_model_state_dict(tm), sd)
    fresh = minidl.compile(build(minidl, seed=1))
    assert not any(dsd.set_model_state_dict(fresh, sd))
    np.testing.assert_array_equal(fresh._orig_mod[3][1].weight.detach().numpy(), mm[3][1].weight.detach().numpy())


# ---------------------------------------------------------------------------------------------- errors
def test_errors_name_the_option_the_key_and_the_model():
    (_, _), (mm, mopt) = pair()
    osd = dsd.get_optimizer_state_dict(mm, mopt)
    stranger = minidl.optim.SGD(minidl.nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(KeyError, match=r"optimizer 0 \(SGD\) holds a parameter of shape \(2, 2\) that is not a "
                                       r"parameter of the model \(Sequential\)"):
        dsd.get_optimizer_state_dict(mm, stranger)
    with pytest.raises(KeyError, match="not a parameter of the model"):
        dsd.set_optimizer_state_dict(mm, [mopt[0], stranger], osd)
    bad = {"state": {**osd["state"], "4.weight": {}}, "param_groups": osd["param_groups"]}
    with pytest.raises(KeyError, match=r"\['4.weight'\].*no parameters of Sequential.*strict=False"):
        dsd.set_optimizer_state_dict(mm, mopt, bad)
    dsd.set_optimizer_state_dict(mm, mopt, bad, options=options(dsd, strict=False))   # torch ignores it
    missing = {"state": {k: v for k, v in osd["state"].items() if k != "0.bias"}, "param_groups": osd["param_groups"]}
    with pytest.raises(RuntimeError, match=r"no entry for parameter '0.bias' of Sequential.*strict=False"):
        dsd.set_optimizer_state_dict(mm, mopt, missing)
    flat = dsd.get_optimizer_state_dict(mm, mopt, options=options(dsd, flatten_optimizer_state_dict=True))
    del flat["param_groups.0.weight.lr"]
    with pytest.raises(KeyError, match="no 'param_groups.0.weight.lr'"):
        dsd.set_optimizer_state_dict(mm, mopt, flat)
    with pytest.raises(ValueError, match=r"broadcast_from_rank0=True\) needs full_state_dict=True"):
        dsd.set_model_state_dict(mm, {}, options=options(dsd, broadcast_from_rank0=True))
    with pytest.raises(RuntimeError, match="optimizer state dict is empty"):
        dsd.set_optimizer_state_dict(mm, mopt, {})
    with pytest.raises(RuntimeError, match="no optimizers"):
        dsd.get_optimizer_state_dict(mm, [])
    with pytest.raises(RuntimeError, match="model state dict of Sequential is empty"):
        dsd.set_model_state_dict(mm, {})


# ---------------------------------------------------------------------------------------------- sim ranks
def test_ddp_names_are_the_plain_models_on_sim_ranks():
    """A DDP model's dicts (every rank trains on the whole batch: BatchNorm's statistics are per rank) equal
    torch's of the plain model, and load into a plain model and back."""
    (tm, topt), _ = pair("two")

    def rank_fn(rank):
        model = DistributedDataParallel(build(minidl))
        optimizers = make_optimizers(minidl, model.module, "two")
        train(minidl, model, optimizers, 2)
        sd, osd = dsd.get_state_dict(model, optimizers)
        plain = build(minidl, seed=1)
        plain_opt = make_optimizers(minidl, plain, "two")
        assert not any(dsd.set_state_dict(plain, plain_opt, model_state_dict=sd, optim_state_dict=osd))
        back = DistributedDataParallel(build(minidl, seed=2))
        back_opt = make_optimizers(minidl, back.module, "two")
        dsd.set_state_dict(back, back_opt, model_state_dict=dsd.get_model_state_dict(plain),
                           optim_state_dict=dsd.get_optimizer_state_dict(plain, plain_opt))
        return sd, osd, dsd.get_state_dict(back, back_opt)

    theirs = tsd.get_state_dict(tm, topt)
    for sd, osd, back in dist.sim.run(2, rank_fn):
        assert list(sd)[0] == "0.weight"
        assert_same(theirs[0], sd)
        assert_same(theirs[1], osd)
        assert_same(theirs, back)


@pytest.mark.parametrize("flatten", [False, True])
def test_broadcast_from_rank0_on_sim_ranks(flatten):
    """Only rank 0 holds the checkpoint; every rank ends with its values (model, optimizers, groups)."""
    (_, _), (mm, mopt) = pair("two")
    opts = options(dsd, full_state_dict=True, broadcast_from_rank0=True, flatten_optimizer_state_dict=flatten)
    saved = dsd.get_state_dict(mm, mopt, options=opts)

    def rank_fn(rank):
        model = build(minidl, seed=1 + rank)
        optimizers = make_optimizers(minidl, model, "two")
        optimizers[0].param_groups[0]["lr"] = 0.5
        sd, osd = saved if rank == 0 else ({}, {})
        dsd.set_model_state_dict(model, sd, options=opts)
        dsd.set_optimizer_state_dict(model, optimizers, osd, options=opts)
        other = build(minidl, seed=3)
        other_opt = make_optimizers(minidl, other, "two")
        sd, osd = (saved[0], saved[1]) if rank == 0 else ({}, {})
        dsd.set_state_dict(other, other_opt, model_state_dict=sd, optim_state_dict=osd, options=opts)
        return dsd.get_state_dict(model, optimizers), dsd.get_state_dict(other, other_opt)

    plain = dsd.get_state_dict(mm, mopt)
    for got, other in dist.sim.run(2, rank_fn):
        assert_same(plain, got)
        assert_same(plain, other)


def test_full_cpu_offload_state_dict_only_on_rank0():
    def rank_fn(rank):
        model = build(minidl)
        return dsd.get_model_state_dict(model, options=options(dsd, full_state_dict=True, cpu_offload=True))
    first, second = dist.sim.run(2, rank_fn)
    assert list(first) == list(build(minidl).state_dict()) and second == {}
