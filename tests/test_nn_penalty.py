"""The L1/L2 weight penalty: closed-form values and gradients, and its equivalence to SGD weight decay."""
import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.nn.utils import weight_penalty


def test_penalty_values_and_gradients_match_closed_forms():
    a = minidl.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    b = minidl.tensor([-1.5, 4.0], requires_grad=True)
    l1 = weight_penalty([a, b], p=1)
    assert l1.item() == pytest.approx(1 + 2 + 0.5 + 3 + 1.5 + 4)
    l1.backward()
    assert np.array_equal(a.grad.numpy(), np.sign(a.detach().numpy()))
    a.grad = b.grad = None
    l2 = weight_penalty([a, b], p=2)
    assert l2.item() == pytest.approx(1 + 4 + 0.25 + 9 + 2.25 + 16)
    l2.backward()
    assert np.allclose(b.grad.numpy(), 2 * b.detach().numpy())
    with pytest.raises(ValueError):
        weight_penalty([a], p=3)


def test_l2_penalty_in_the_loss_equals_sgd_weight_decay():
    minidl.manual_seed(0)
    x, y = minidl.randn(16, 3), minidl.randn(16, 1)
    models = [nn.Linear(3, 1) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    lam = 0.05
    with_penalty = minidl.optim.SGD(models[0].parameters(), lr=0.1)
    with_decay = minidl.optim.SGD(models[1].parameters(), lr=0.1, weight_decay=2 * lam)
    for _ in range(5):
        for model, opt, penalty in ((models[0], with_penalty, lam), (models[1], with_decay, 0.0)):
            loss = ((model(x) - y) ** 2).mean()
            if penalty:
                loss = loss + penalty * weight_penalty(model.parameters(), p=2)
            opt.zero_grad()
            loss.backward()
            opt.step()
    for p0, p1 in zip(models[0].parameters(), models[1].parameters()):
        assert np.allclose(p0.detach().numpy(), p1.detach().numpy(), atol=1e-6)
