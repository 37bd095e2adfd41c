"""ZeroRedundancyOptimizer on simulated ranks: training with it equals training with the plain optimizer in one
process (the spec: ZeRO changes where the state lives, not the arithmetic), each rank holds its share's state only
(dealt out largest first to the emptiest rank, torch's rule), the consolidated state_dict is the plain optimizer's,
and it loads back — at another world size too — to continue as the plain optimizer continues."""
import numpy as np
import pytest

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist.optim import ZeroRedundancyOptimizer

X, Y = np.random.RandomState(0).randn(8, 6), np.random.RandomState(1).randn(8, 2)


def _model():
    minidl.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def _groups(model):
    """Two groups with different hyperparameters (weights decayed, biases not)."""
    return [{"params": [p for p in model.parameters() if p.ndim == 2], "weight_decay": 0.1},
            {"params": [p for p in model.parameters() if p.ndim == 1], "weight_decay": 0.0}]


def _train(model, optimizer, steps, schedule=None):
    for _ in range(steps):
        optimizer.zero_grad()
        ((model(minidl.tensor(X)) - minidl.tensor(Y)) ** 2).mean().backward()
        optimizer.step()
        if schedule is not None:
            schedule.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


def _state(sd):
    return {k: {n: (v.numpy() if hasattr(v, "numpy") else v) for n, v in s.items()} for k, s in sd["state"].items()}


def _zero(rank, bucket_view, steps):
    model = _model()
    zero = ZeroRedundancyOptimizer(_groups(model), minidl.optim.AdamW, parameters_as_bucket_view=bucket_view, lr=0.05)
    schedule = minidl.optim.lr_scheduler.StepLR(zero, step_size=2, gamma=0.5)
    weights = _train(model, zero, steps, schedule)
    held = sorted(p.numel() for p in zero.optim.state)
    zero.consolidate_state_dict(to=0)
    if rank == 0:
        return weights, held, zero.state_dict()
    refusal = rf"not been consolidated on rank {rank}; call consolidate_state_dict\(to={rank}\)"
    with pytest.raises(RuntimeError, match=refusal):
        zero.state_dict()
    return weights, held, None


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("bucket_view", [False, True], ids=["per-parameter", "bucket-view"])
def test_zero_trains_as_the_plain_optimizer_with_a_share_of_the_state_on_each_rank(world, bucket_view):
    model = _model()
    plain = minidl.optim.AdamW(_groups(model), lr=0.05)
    want = _train(model, plain, 5, minidl.optim.lr_scheduler.StepLR(plain, step_size=2, gamma=0.5))
    results = dist.sim.run(world, _zero, bucket_view, 5)
    for weights, _, _ in results:
        for got, w in zip(weights, want):
            np.testing.assert_allclose(got, w, rtol=0, atol=1e-13)
    # the shares: sizes 30, 20, 8 (the weights' group) then 5, 4, 2 (the biases'), each to the rank holding the
    # fewest elements so far (counted across groups; the first such rank on a tie)
    shares = {2: [[4, 30], [2, 5, 8, 20]], 4: [[30], [20], [2, 8], [4, 5]]}[world]
    assert [held for _, held, _ in results] == shares
    consolidated = results[0][2]
    expected = plain.state_dict()
    assert consolidated["param_groups"] == expected["param_groups"]
    got, wanted = _state(consolidated), _state(expected)
    assert got.keys() == wanted.keys()
    for k in wanted:
        for name in wanted[k]:
            np.testing.assert_allclose(got[k][name], wanted[k][name], rtol=0, atol=1e-13)


def _resumed(rank, state_dict):
    model = _model()
    with minidl.no_grad():
        for p, w in zip(model.parameters(), state_dict["weights"]):
            p.copy_(minidl.tensor(w))
    zero = ZeroRedundancyOptimizer(_groups(model), minidl.optim.AdamW, lr=0.05)
    zero.load_state_dict(state_dict["optimizer"])
    return _train(model, zero, 3), sorted(p.numel() for p in zero.optim.state)


def test_a_consolidated_state_loads_at_another_world_size_and_continues_as_the_plain_optimizer():
    """Saved by ZeRO on 4 ranks, loaded by ZeRO on 2 (and the plain optimizer in one process): three more steps
    each, the same weights."""
    weights, _, saved = dist.sim.run(4, _zero, False, 4)[0]
    model = _model()
    with minidl.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(minidl.tensor(w))
    plain = minidl.optim.AdamW(_groups(model), lr=0.05)
    plain.load_state_dict(saved)
    want = _train(model, plain, 3)
    results = dist.sim.run(2, _resumed, {"weights": weights, "optimizer": saved})
    assert [held for _, held in results] == [[4, 30], [2, 5, 8, 20]]   # (each rank's share's state only)
    for got, _ in results:
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-13)


def _overlapped(rank, world, steps):
    from minidl.dist.ddp_comm_hooks import allreduce_hook, hook_with_zero_step
    from minidl.nn.parallel import DistributedDataParallel as DDP
    model = _model()
    ddp = DDP(model, bucket_cap_mb=0.0001)   # (several buckets: each owned whole by one rank)
    zero = ZeroRedundancyOptimizer(model.parameters(), minidl.optim.AdamW, overlap_with_ddp=True, lr=0.05)
    with pytest.raises(RuntimeError, match="register it with the DDP module first"):
        zero.consolidate_state_dict()
    ddp.register_comm_hook(None, hook_with_zero_step(allreduce_hook, ddp, zero))
    b = len(X) // world
    x, y = minidl.tensor(X[rank * b:(rank + 1) * b]), minidl.tensor(Y[rank * b:(rank + 1) * b])
    for _ in range(steps):
        zero.zero_grad()
        ((ddp(x) - y) ** 2).mean().backward()   # (the step runs inside: step() would do nothing)
    with pytest.warns(UserWarning, match="should not be included in the training loop"):
        assert zero.step() is None
    zero.consolidate_state_dict(to=0)
    return ([p.detach().numpy().copy() for p in model.parameters()], len(ddp.reducer.buckets),
            zero.state_dict() if rank == 0 else None)


@pytest.mark.parametrize("world", [2, 4])
def test_overlap_with_ddp_steps_each_bucket_in_backward_as_the_plain_optimizer_steps(world):
    model = _model()
    plain = minidl.optim.AdamW(model.parameters(), lr=0.05)
    want = _train(model, plain, 3)
    results = dist.sim.run(world, _overlapped, world, 3)
    assert results[0][1] > 2
    for weights, _, _ in results:
        for got, w in zip(weights, want):
            np.testing.assert_allclose(got, w, rtol=0, atol=1e-13)
    assert results[0][2]["param_groups"] == plain.state_dict()["param_groups"]   # (every default, as the plain)
    got, expected = _state(results[0][2]), _state(plain.state_dict())
    assert got.keys() == expected.keys()
    for k in expected:
        for name in expected[k]:
            np.testing.assert_allclose(got[k][name], expected[k][name], rtol=0, atol=1e-13)


def _two_groups(rank):
    with pytest.raises(ValueError, match="overlap_with_ddp=True supports a single parameter group"):
        ZeroRedundancyOptimizer(_groups(_model()), minidl.optim.SGD, overlap_with_ddp=True, lr=0.1)
    return True


def test_overlap_with_ddp_takes_one_parameter_group():
    assert dist.sim.run(2, _two_groups) == [True, True]


def test_the_arguments_are_torchs():
    torch_optim = pytest.importorskip("torch.distributed.optim")
    import inspect
    names = [(p.name, p.kind, p.default) for p in
             inspect.signature(torch_optim.ZeroRedundancyOptimizer.__init__).parameters.values()]
    ours = [(p.name, p.kind, p.default)
            for p in inspect.signature(ZeroRedundancyOptimizer.__init__).parameters.values()]
    assert ours == names
    assert inspect.signature(ZeroRedundancyOptimizer.consolidate_state_dict).parameters["to"].default == 0
