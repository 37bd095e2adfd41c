"""fully_shard (FSDP2) on simulated ranks. The spec: training a sharded model on n ranks, each with 1/n of the
global batch, equals training the plain model on the whole batch in one process (float64, to rounding); each
rank holds chunk's rows of every parameter, and a module's full parameters exist only around its forward and
backward. torch 2.13's names and defaults are checked against the installed torch."""
import inspect

import numpy as np
import pytest

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist.device_mesh import init_device_mesh
from minidl.dist.fsdp import (CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, UnshardHandle,
                              fully_shard, register_fsdp_forward_method)
from minidl.dist.tensor import DTensor, Replicate, Shard

X, Y = np.random.RandomState(0).randn(8, 6), np.random.RandomState(1).randn(8, 2)


def _model():
    minidl.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3), nn.Tanh(), nn.Linear(3, 2)).double()


def _loss(model, x, y):
    return ((model(minidl.tensor(x)) - minidl.tensor(y)) ** 2).mean()


def _train(model, opt, x, y, steps=3):
    for _ in range(steps):
        opt.zero_grad()
        _loss(model, x, y).backward()
        opt.step()


def _whole(model) -> list:
    return [(p.full_tensor() if isinstance(p, DTensor) else p).detach().numpy().copy() for p in model.parameters()]


def _reference(steps=3):
    model = _model()
    _train(model, minidl.optim.AdamW(model.parameters(), lr=0.05), X, Y, steps)
    return _whole(model)


def _sharded(mesh=None, **options):
    model = _model()
    for i in (0, 2, 4):
        fully_shard(model[i], mesh=mesh, **options)
    return fully_shard(model, mesh=mesh, **options)


def _batch(rank, n):
    b = len(X) // n
    return X[rank * b:(rank + 1) * b], Y[rank * b:(rank + 1) * b]


def _fsdp_training(rank, n, reshard_after_forward):
    model = _sharded(reshard_after_forward=reshard_after_forward)
    _train(model, minidl.optim.AdamW(model.parameters(), lr=0.05), *_batch(rank, n))
    return _whole(model)


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("reshard_after_forward", [None, True, False])
def test_fsdp_trains_as_one_process_on_the_whole_batch(n, reshard_after_forward):
    want = _reference()
    for got in dist.sim.run(n, _fsdp_training, n, reshard_after_forward):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)


def _layout(rank):
    model = _sharded()
    first = model[2].weight   # 3 rows of 5 over 4 ranks: chunk's 1, 1, 1, 0
    return (type(model).__name__, type(model[2]).__name__, isinstance(model[2], FSDPModule),
            isinstance(first, nn.Parameter), first.placements, tuple(first.shape), tuple(first.to_local().shape),
            [type(p).__name__ for p in model.parameters()] == ["_DTensorParameter"] * 6)


def test_parameters_are_dim0_shards_in_chunks_and_the_class_is_fsdp_named():
    results = dist.sim.run(4, _layout)
    for rank, (root, block, is_fsdp, is_param, placements, shape, local, all_dtensors) in enumerate(results):
        assert (root, block, is_fsdp, is_param) == ("FSDPSequential", "FSDPLinear", True, True)
        assert placements == (Shard(0),) and shape == (3, 5) and all_dtensors
        assert local == ((1, 5) if rank < 3 else (0, 5))   # torch.chunk(3 rows, 4): 1, 1, 1 and none


def _storage_bytes(call):
    return [storage.nbytes() for storage in call.storages]


def _memory(rank):
    model = _sharded()
    loss = _loss(model, *_batch(rank, 2))
    after_forward = {i: _storage_bytes(model[i]._fsdp_group.last) for i in (0, 2, 4)}
    root_kept = model._fsdp_group.last.storages == []   # (the root holds no parameter of its own here)
    loss.backward()
    after_backward = {i: _storage_bytes(model[i]._fsdp_group.last) for i in (0, 2, 4)}
    return after_forward, root_kept, after_backward, [type(model[i].weight).__name__ for i in (0, 2, 4)]


def test_a_blocks_full_parameters_are_freed_after_forward_and_after_backward():
    for after_forward, root_kept, after_backward, kinds in dist.sim.run(2, _memory):
        assert all(b == [0, 0] for b in after_forward.values()) and root_kept
        assert all(b == [0, 0] for b in after_backward.values())
        assert kinds == ["_DTensorParameter"] * 3   # (the shards are back on the modules)


def _root_keeps(rank):
    model = _model()
    fully_shard(model[0])
    fully_shard(model)   # the root takes Linear 2 and 4's parameters; None: it keeps them for backward
    loss = _loss(model, *_batch(rank, 2))
    kept = _storage_bytes(model._fsdp_group.last)
    freed = _storage_bytes(model[0]._fsdp_group.last)
    loss.backward()
    return kept, freed, _storage_bytes(model._fsdp_group.last), model._fsdp_group.reshard_after_forward


def test_the_root_keeps_its_parameters_from_forward_to_backward_by_default():
    for kept, freed, after, flag in dist.sim.run(2, _root_keeps):
        assert all(b > 0 for b in kept) and len(kept) == 4 and freed == [0, 0]
        assert after == [0, 0, 0, 0] and flag is False


def _accumulated(rank, n, micro):
    model = _sharded()
    opt = minidl.optim.SGD(model.parameters(), lr=0.1)
    x, y = _batch(rank, n)
    size = len(x) // micro
    for i in range(micro):
        model.set_requires_gradient_sync(i == micro - 1)
        grads_before = [p.grad for p in model.parameters()]
        _loss(model, x[i * size:(i + 1) * size], y[i * size:(i + 1) * size]).backward()
        if i < micro - 1:
            assert all(g is None for g in grads_before) and all(p.grad is None for p in model.parameters())
    opt.step()
    return _whole(model)


def test_gradient_accumulation_without_sync_reduces_the_sum_once():
    model = _model()
    opt = minidl.optim.SGD(model.parameters(), lr=0.1)
    for i in range(2):   # each rank's two micro-batches, summed: the mean over both halves of every rank's batch
        rows = np.concatenate([np.arange(r * 4 + i * 2, r * 4 + i * 2 + 2) for r in range(2)])
        (_loss(model, X[rows], Y[rows])).backward()
    opt.step()
    want = _whole(model)
    for got in dist.sim.run(2, _accumulated, 2, 2):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)


def _hsdp(rank):
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    model = _sharded(mesh=mesh)
    _train(model, minidl.optim.AdamW(model.parameters(), lr=0.05), *_batch(rank, 4))
    return _whole(model), model[0].weight.placements


def test_hsdp_on_a_2d_mesh_replicates_over_dim0_and_shards_over_dim1():
    want = _reference()
    for got, placements in dist.sim.run(4, _hsdp):
        assert placements == (Replicate(), Shard(0))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)


def _prefetching(rank):
    model = _sharded()
    started = []
    for i in (0, 2, 4):
        group = model[i]._fsdp_group
        group.start_gather = (lambda g, i: lambda: started.append(i) or type(g).start_gather(g))(group, i)
    model[0].set_modules_to_forward_prefetch([model[2]])
    model[2].set_modules_to_forward_prefetch([model[4]])
    model[4].set_modules_to_backward_prefetch([model[2]])
    model[2].set_modules_to_backward_prefetch([model[0]])
    _train(model, minidl.optim.AdamW(model.parameters(), lr=0.05), *_batch(rank, 2))
    return _whole(model), started[:6]


def test_prefetching_starts_the_next_modules_gathers_early_and_changes_no_number():
    want = _reference()
    for got, started in dist.sim.run(2, _prefetching):
        # forward: 0 asks itself, then starts 2; 2 (already started) starts 4; backward: 4 refills itself
        # (it was freed after forward) and starts 2; 2 starts 0
        assert started == [0, 2, 2, 4, 4, 4]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)


def _unsharding(rank, async_op):
    model = _sharded()
    want = model[2].weight.full_tensor().detach().numpy().copy()
    handle = model[2].unshard(async_op=async_op)
    if async_op:
        assert isinstance(handle, UnshardHandle)
        handle.wait()
    else:
        assert handle is None
    full = model[2].weight
    seen = (type(full).__name__, full.detach().numpy().copy())
    loss = _loss(model, *_batch(rank, 2))   # the forward uses what unshard() gathered
    model[2].reshard()
    loss.backward()
    return seen, want, type(model[2].weight).__name__


@pytest.mark.parametrize("async_op", [False, True])
def test_unshard_puts_the_full_parameters_on_the_module_until_reshard(async_op):
    for (kind, full), want, after in dist.sim.run(2, _unsharding, async_op):
        assert kind == "Tensor" and after == "_DTensorParameter"
        np.testing.assert_array_equal(full, want)


def _mixed(rank):
    model = _model()
    policy = MixedPrecisionPolicy(param_dtype=minidl.bfloat16, reduce_dtype=minidl.float32,
                                  output_dtype=minidl.float64)
    for i in (0, 2, 4):
        fully_shard(model[i], mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    seen = []   # (a hook after fully_shard's: it sees what the forward computes with)
    model[2].register_forward_pre_hook(lambda m, args: seen.append((args[0].dtype, m.weight.dtype)))
    x, y = _batch(rank, 2)
    out = model(minidl.tensor(x))
    ((out - minidl.tensor(y)) ** 2).mean().backward()
    return seen, out.dtype, model[0].weight.dtype, model[0].weight.grad.dtype, _whole_grads(model)


def _whole_grads(model):
    return [p.grad.full_tensor().numpy() for p in model.parameters()]


def test_mixed_precision_computes_in_bfloat16_and_reduces_in_float32():
    model = _model()
    _loss(model, X, Y).backward()
    want = [p.grad.numpy() for p in model.parameters()]
    for seen, out_dtype, param_dtype, grad_dtype, grads in dist.sim.run(2, _mixed):
        assert seen == [(minidl.bfloat16, minidl.bfloat16)]
        assert (out_dtype, param_dtype, grad_dtype) == (minidl.float64, minidl.float64, minidl.float64)
        for g, w in zip(grads, want):   # (bfloat16 arithmetic: about 3 significant digits)
            np.testing.assert_allclose(g, w, rtol=0.05, atol=0.02)


def _offloaded(rank):
    model = _sharded(offload_policy=CPUOffloadPolicy())
    _train(model, minidl.optim.AdamW(model.parameters(), lr=0.05), *_batch(rank, 2))
    return _whole(model), {str(p.to_local().device) for p in model.parameters()}


def test_cpu_offload_keeps_the_shards_in_host_memory():
    want = _reference()
    for got, devices in dist.sim.run(2, _offloaded):
        assert devices == {"cpu"}
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)


def _refusals(rank):
    model = _sharded()
    with pytest.raises(RuntimeError, match="FSDPLinear is already sharded"):
        fully_shard(model[0])
    with pytest.raises(NotImplementedError, match="reshard_after_forward=2"):
        fully_shard(nn.Linear(2, 2), reshard_after_forward=2)
    with pytest.raises(NotImplementedError, match="list of modules"):
        fully_shard([nn.Linear(2, 2)])
    with pytest.raises(ValueError, match="scalar"):
        holder = nn.Module()
        holder.scale = nn.Parameter(minidl.tensor(1.0))
        fully_shard(holder)
    with pytest.raises(ValueError, match="set_modules_to_forward_prefetch: expects FSDPModules"):
        model[0].set_modules_to_forward_prefetch([nn.Linear(2, 2)])
    return True


def test_bad_input_is_refused_with_a_clear_error():
    assert dist.sim.run(2, _refusals) == [True, True]
    with pytest.raises(ValueError, match="param_dtype must be a floating dtype"):
        MixedPrecisionPolicy(param_dtype=minidl.int64)
    with pytest.raises(ValueError, match="reduce_dtype must be a floating dtype"):
        MixedPrecisionPolicy(reduce_dtype="float32")


def test_the_api_has_torchs_names_and_defaults():
    fsdp = pytest.importorskip("torch.distributed.fsdp")

    def described(fn):
        return [(p.name, p.kind, repr(p.default) if p.default is not p.empty else None)
                for p in inspect.signature(fn).parameters.values()]

    assert [n for n, *_ in described(fully_shard)] == [n for n, *_ in described(fsdp.fully_shard)]
    for name in ("reshard_after_forward", "shard_placement_fn", "ignored_params", "dp_mesh_dims", "mesh"):
        assert inspect.signature(fully_shard).parameters[name].default is None
    for ours, theirs in ((MixedPrecisionPolicy, fsdp.MixedPrecisionPolicy), (CPUOffloadPolicy,
                                                                             fsdp.CPUOffloadPolicy)):
        assert described(ours) == described(theirs)
    assert OffloadPolicy() == OffloadPolicy() and isinstance(CPUOffloadPolicy(), OffloadPolicy)
    for method in ("unshard", "reshard", "set_modules_to_forward_prefetch", "set_modules_to_backward_prefetch",
                   "set_requires_gradient_sync", "set_reshard_after_forward", "set_gradient_divide_factor"):
        assert described(getattr(FSDPModule, method)) == described(getattr(fsdp.FSDPModule, method)), method


def _full_state_round_trip(rank):
    from minidl.dist.checkpoint.state_dict import (StateDictOptions, get_state_dict, set_state_dict)
    full = StateDictOptions(full_state_dict=True)
    model = _sharded()
    opt = minidl.optim.AdamW(model.parameters(), lr=0.05)
    _train(model, opt, *_batch(rank, 2), steps=2)
    model_sd, optim_sd = get_state_dict(model, opt, options=full)
    kinds = {type(v).__name__ for v in model_sd.values()} | {type(v).__name__ for s in optim_sd["state"].values()
                                                              for v in s.values()}
    fresh = _sharded()   # (another FSDP model: its own shards and a fresh optimizer, given the full state)
    fresh_opt = minidl.optim.AdamW(fresh.parameters(), lr=0.05)
    set_state_dict(fresh, fresh_opt, model_state_dict=model_sd, optim_state_dict=optim_sd, options=full)
    _train(fresh, fresh_opt, *_batch(rank, 2), steps=1)
    return kinds, {k: v.numpy().copy() for k, v in model_sd.items()}, _whole(fresh)


def test_a_full_state_dict_gathers_the_shards_and_loads_back_into_them():
    model = _model()
    opt = minidl.optim.AdamW(model.parameters(), lr=0.05)
    _train(model, opt, X, Y, steps=2)
    after_two = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    _train(model, opt, X, Y, steps=1)
    want = _whole(model)
    for kinds, full, got in dist.sim.run(2, _full_state_round_trip):
        assert kinds == {"Tensor"}   # (whole plain tensors: parameters and Adam's moments)
        for k, v in after_two.items():
            np.testing.assert_allclose(full[k], v, rtol=0, atol=1e-12)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)


class _Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 2).double()

    def forward(self, x):
        return self.linear(x)

    def score(self, x):   # (not forward: fully_shard's hooks do not run around it by themselves)
        return self.linear(x).sum(-1)


def _scoring(rank):
    minidl.manual_seed(0)
    model = fully_shard(_Scorer())
    with pytest.raises(RuntimeError, match="mixed minidl.Tensor and DTensor"):   # (the shards are on the module)
        model.score(minidl.tensor(X))
    register_fsdp_forward_method(model, "score")
    register_fsdp_forward_method(nn.Linear(2, 2), "forward")   # (not an FSDP module: nothing happens)
    return model.score(minidl.tensor(X)).detach().numpy(), type(model.linear.weight).__name__


def test_a_registered_method_gathers_the_parameters_as_forward_does():
    minidl.manual_seed(0)
    want = _Scorer().score(minidl.tensor(X)).detach().numpy()
    for got, kind in dist.sim.run(2, _scoring):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
        assert kind == "_DTensorParameter"


class _Routed(nn.Module):
    """``b`` serves the samples whose first feature is below -1 only (row 7 of X: rank 1's on two ranks)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 2), nn.Linear(6, 2)

    def forward(self, x):
        outs = [self.a(x[i:i + 1]) + (self.b(x[i:i + 1]) if x[i, 0].item() < -1.0 else 0.0) for i in range(len(x))]
        return minidl.cat(outs)


def _routed_model():
    minidl.manual_seed(0)
    return _Routed().double()


def _routed(rank):
    model = fully_shard(_routed_model())
    _train(model, minidl.optim.AdamW(model.parameters(), lr=0.05), *_batch(rank, 2))
    return _whole(model)


def test_a_gradient_that_reaches_a_parameter_on_some_ranks_only_reaches_every_shard():
    assert (X[:4, 0] >= -1).all() and (X[4:, 0] < -1).sum() == 1
    model = _routed_model()
    _train(model, minidl.optim.AdamW(model.parameters(), lr=0.05), X, Y)
    want = _whole(model)
    for got in dist.sim.run(2, _routed):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)


def _skipping(rank):
    """Two micro-batches a step; Linear 2 (prefetched by Linear 0 in forward, by Linear 4 in backward) is left out
    of step 1's second micro-batch: the gathers started for it then are stale after the step, never used."""
    model = _sharded()
    model[0].set_modules_to_forward_prefetch([model[2]])
    model[4].set_modules_to_backward_prefetch([model[2]])
    opt = minidl.optim.SGD(model.parameters(), lr=0.1)
    return _whole(_skip_training(model, opt, *_batch(rank, 2)))


def _skip_training(model, opt, x, y, micro_rows=(slice(0, 2), slice(2, 4))):
    for step in range(2):
        opt.zero_grad()
        for micro, rows in enumerate(micro_rows):
            skip = step == 0 and micro == 1
            h = model[1](model[0](minidl.tensor(x[rows])))
            h = h[:, :3] if skip else model[3](model[2](h))
            ((model[4](h) - minidl.tensor(y[rows])) ** 2).mean().backward()
        opt.step()
    return model


def test_a_prefetched_gather_a_step_made_stale_is_gathered_again():
    model = _model()
    each_ranks = [[0, 1, 4, 5], [2, 3, 6, 7]]   # (micro-batch m: rows m of both ranks' halves)
    want = _whole(_skip_training(model, minidl.optim.SGD(model.parameters(), lr=0.1), X, Y, each_ranks))
    for got in dist.sim.run(2, _skipping):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)


class _Generator(_Scorer):
    def generate(self, x, steps):   # (calls forward: its gathers nest in the method's)
        for _ in range(steps):
            x = minidl.cat([x[:, 2:], self(x)], 1)
        return x


def _generating(rank):
    minidl.manual_seed(0)
    model = fully_shard(_Generator())
    register_fsdp_forward_method(model, "generate")
    return model.generate(minidl.tensor(X), 3).detach().numpy()


def test_a_registered_method_may_call_forward():
    minidl.manual_seed(0)
    want = _Generator().generate(minidl.tensor(X), 3).detach().numpy()
    for got in dist.sim.run(2, _generating):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)


class _Aux(nn.Module):
    """A loss term on the module's weight kept aside (a mixture of experts' balance loss, say): it reaches the
    loss without going through the module's output."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 2).double()

    def forward(self, x):
        self.aux = (self.linear.weight ** 2).sum()
        return self.linear(x)


def _aux(rank):
    minidl.manual_seed(0)
    model = nn.Sequential(_Aux(), nn.Linear(2, 2).double())
    fully_shard(model[0])
    fully_shard(model)
    out = model(minidl.tensor(X)).sum()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):   # (never the freed memory)
        (out + model[0].aux).backward()
    return True


def test_backward_through_a_freed_full_parameter_is_refused():
    assert dist.sim.run(2, _aux) == [True, True]


def _tied_across(rank):
    model = _model()
    model[4].weight = nn.Parameter(minidl.zeros(2, 3, dtype=minidl.float64))
    model[2].weight = nn.Parameter(model[4].weight.detach()[:, :2].t().contiguous().clone())  # (untied: a copy)
    tied = nn.Sequential(model, nn.Linear(3, 2, bias=False).double())
    tied[1].weight = model[4].weight
    fully_shard(model[4])
    with pytest.raises(ValueError, match="tied to one that fully_shard already sharded with a submodule"):
        fully_shard(tied)
    return True


def test_a_parameter_tied_across_groups_is_refused():
    assert dist.sim.run(2, _tied_across) == [True, True]


def _child_first(rank):
    model = _sharded()
    model[0](minidl.tensor(X[:2]))
    with pytest.raises(RuntimeError, match="FSDP requires running forward through the root module first"):
        model(minidl.tensor(X[:2]))
    return True


def test_the_root_runs_forward_first():
    assert dist.sim.run(2, _child_first) == [True, True]


def _frozen(rank):
    from minidl.dist import debug
    model = _sharded()
    for p in list(model[0].parameters()) + list(model[2].parameters()):
        p.requires_grad_(False)
    x, y = _batch(rank, 2)
    loss = _loss(model, x, y)
    before = debug.sent_bytes()
    loss.backward()
    sent = debug.sent_bytes() - before
    _train(model, minidl.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1), x, y, steps=2)
    return _whole(model), sent, [p.grad is None for p in model.parameters()]


def test_frozen_parameters_are_gathered_but_never_reduced():
    model = _model()
    for p in list(model[0].parameters()) + list(model[2].parameters()):
        p.requires_grad_(False)
    _train(model, minidl.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1), X, Y, steps=2)
    want = _whole(model)
    for got, sent, no_grad in dist.sim.run(2, _frozen):
        assert no_grad == [True] * 4 + [False] * 2
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)


def _built():
    return nn.Sequential(nn.Embedding(10, 6), nn.LayerNorm(6), nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))


def _on_meta(rank):
    with minidl.device("meta"):
        model = _built()
    fully_shard(model[2])
    fully_shard(model[4])
    fully_shard(model)
    with pytest.raises(RuntimeError, match=r"Embedding.weight is on the meta device .*to_empty"):
        model(minidl.tensor([[1, 2]]))
    model.to_empty(device="cpu")
    pieces = {name: tuple(p.to_local().shape) for name, p in model.named_parameters()}
    minidl.manual_seed(0)
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return pieces, {name: p.full_tensor().detach().numpy() for name, p in model.named_parameters()}


def test_a_model_built_on_meta_is_materialised_shard_by_shard_as_built_whole():
    minidl.manual_seed(0)
    want = {name: p.detach().numpy() for name, p in _built().named_parameters()}
    for rank, (pieces, got) in enumerate(dist.sim.run(2, _on_meta)):
        assert pieces["0.weight"] == (5, 6) and pieces["2.weight"] == ((3, 6) if rank == 0 else (2, 6))
        for name, w in want.items():
            np.testing.assert_array_equal(got[name], w)
