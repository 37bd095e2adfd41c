"""Optimizers stepping DTensor parameters: a Linear's parameters split by output features (column-parallel) or
whole (data parallel over a split batch), trained three steps on 2 simulated ranks, give the losses and weights of
the same training in one process (float64), for every dense optimizer but LBFGS, by the multi-tensor and the
per-parameter paths; the state lies as the parameters; ``*_like`` of a partial sum is whole; in-place ops run by
the op's rule where it leaves the tensor placed as it is, and refuse by name where it would not."""
import numpy as np
import pytest

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist.device_mesh import init_device_mesh
from minidl.dist.tensor import DTensor, Partial, Replicate, Shard, distribute_module, distribute_tensor

X, Y = np.random.RandomState(0).randn(6, 5), np.random.RandomState(1).randn(6, 3)
OPTIMIZERS = [("SGD", {"momentum": 0.9}), ("SGD", {"momentum": 0.9, "foreach": False}), ("Adam", {}),
              ("Adam", {"foreach": False}), ("AdamW", {"weight_decay": 0.1}), ("Adagrad", {}), ("RMSprop", {}),
              ("RMSprop", {"momentum": 0.5, "centered": True}), ("Adamax", {}), ("NAdam", {}), ("RAdam", {}),
              ("Adadelta", {})]


def _model():
    minidl.manual_seed(0)
    return nn.Linear(5, 3).double()


def _train(model, optimizer, x, y):
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        losses.append(float((loss.full_tensor() if isinstance(loss, DTensor) else loss).item()))
    return losses


def _sharded(rank, layout, name, options):
    mesh = init_device_mesh("cpu", (2,))
    model = _model()
    placed = [Shard(0)] if layout == "column-parallel" else [Replicate()]

    def partition(_, module, mesh):
        for key, p in list(module.named_parameters(recurse=False)):
            module.register_parameter(key, nn.Parameter(distribute_tensor(p.detach(), mesh, placed)))
    distribute_module(model, mesh, partition)
    optimizer = getattr(minidl.optim, name)(model.parameters(), lr=0.1, **options)
    x = distribute_tensor(minidl.tensor(X), mesh, [Replicate() if layout == "column-parallel" else Shard(0)])
    y = distribute_tensor(minidl.tensor(Y), mesh, [Shard(1) if layout == "column-parallel" else Shard(0)])
    losses = _train(model, optimizer, x, y)
    state_placed = [s.placements for state in optimizer.state.values() for s in state.values()
                    if isinstance(s, DTensor)]
    return losses, model.weight.full_tensor().detach().numpy(), model.bias.full_tensor().detach().numpy(), \
        all(p == tuple(placed) for p in state_placed) and len(state_placed) > 0


@pytest.mark.parametrize("layout", ["column-parallel", "data-parallel"])
@pytest.mark.parametrize("name, options", OPTIMIZERS, ids=[f"{n}-{o}" for n, o in OPTIMIZERS])
def test_an_optimizer_steps_dtensor_parameters_as_one_process(layout, name, options):
    model = _model()
    want = _train(model, getattr(minidl.optim, name)(model.parameters(), lr=0.1, **options), minidl.tensor(X),
                  minidl.tensor(Y))
    for losses, weight, bias, state_placed in dist.sim.run(2, _sharded, layout, name, options):
        np.testing.assert_allclose(losses, want, rtol=0, atol=1e-12)
        np.testing.assert_allclose(weight, model.weight.detach().numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(bias, model.bias.detach().numpy(), rtol=0, atol=1e-12)
        assert state_placed


def _likes(rank):
    mesh = init_device_mesh("cpu", (2,))
    partial = DTensor.from_local(minidl.ones(2, 3, dtype=minidl.float64), mesh, [Partial()])
    made = [minidl.ones_like(partial), minidl.full_like(partial, 2.0), minidl.zeros_like(partial)]
    return [(m.placements, m.full_tensor().numpy().tolist()) for m in made]


def test_like_of_a_partial_sum_is_whole():
    got = dist.sim.run(2, _likes)[0]
    assert got == [((Replicate(),), [[1.0] * 3] * 2), ((Replicate(),), [[2.0] * 3] * 2),
                   ((Replicate(),), [[0.0] * 3] * 2)]


def _in_place(rank):
    mesh = init_device_mesh("cpu", (2,))
    a = distribute_tensor(minidl.tensor(X), mesh, [Shard(0)])
    b = distribute_tensor(minidl.tensor(X), mesh, [Shard(1)])
    same = a.mul_(2).add_(b, alpha=3)   # (b moved to lie as a)
    partial = DTensor.from_local(minidl.ones(2, 2, dtype=minidl.float64), mesh, [Partial()])
    try:
        partial.exp_()
        refused = None
    except NotImplementedError as e:
        refused = str(e)
    return same is a, a.full_tensor().numpy(), refused


def test_in_place_ops_write_the_pieces_or_refuse_by_name():
    for same, value, refused in dist.sim.run(2, _in_place):
        assert same
        np.testing.assert_allclose(value, 5 * X, rtol=0, atol=1e-12)
        assert refused.startswith("minidl.exp_ on a DTensor placed [P(sum)]: in place needs the result placed")
