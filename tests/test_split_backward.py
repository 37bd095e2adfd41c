"""minidl.autograd.split_backward: a backward in two halves (input gradients now, weight gradients
later) gives PyTorch's gradients of one full backward, computes nothing twice (kernel launches
counted), and narrows every pruned pass to the gradients it was asked for."""
import contextlib
import threading
import time
from collections import Counter

import numpy as np
import pytest
import torch

import minidl
from minidl import kernels
from minidl.autograd import split_backward

WIDTH, HEADS = 8, 2


def block(lib):
    """A transformer block (pre-norm attention and MLP, residuals) in minidl or torch, float64."""
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn = nn.LayerNorm(WIDTH), nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
            self.ln2 = nn.LayerNorm(WIDTH)
            self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))
    return Block().double()


def twins(seed=0):
    """The same block in minidl and torch (torch's weights copied from minidl's)."""
    minidl.manual_seed(seed)
    mine, theirs = block(minidl), block(torch)
    theirs.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy()) for k, v in mine.state_dict().items()})
    return mine, theirs


def data(seed=1):
    rs = np.random.RandomState(seed)
    return rs.randn(3, 5, WIDTH), rs.randn(3, 5, WIDTH)


@contextlib.contextmanager
def launches():
    """Count every cpu kernel launch, by primitive and (for the families that take one) op name."""
    counts = Counter()
    minidl.ones(1) + 1   # (the cpu kernels are registered on first use)
    saved = {key: fn for key, fn in kernels._registry.items() if key[0] == "cpu"}

    def counted(name, fn):
        def launch(*args, **kwargs):
            counts[(name, args[0]) if args and isinstance(args[0], str) else name] += 1
            return fn(*args, **kwargs)
        return launch
    for (device, name), fn in saved.items():
        kernels._registry[(device, name)] = counted(name, fn)
    try:
        yield counts
    finally:
        kernels._registry.update(saved)


def test_the_two_halves_give_torchs_full_backward():
    mine, theirs = twins()
    x, g = data()
    tx = torch.tensor(x, requires_grad=True)
    theirs(tx).backward(torch.tensor(g))
    mx = minidl.tensor(x, requires_grad=True)
    (gx,), weight_pass = split_backward([mine(mx)], [mx], [minidl.tensor(g)])
    assert mx.grad is None and all(p.grad is None for p in mine.parameters())   # inputs' gradients returned
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    weight_pass()
    assert mx.grad is None
    want = dict(theirs.named_parameters())
    for name, p in mine.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), want[name].grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


def test_nothing_is_computed_twice():
    """The launches of the input pass and the weight pass add up to one full backward's, and each
    half does its share: every linear map's input gradient in the first, its weight's in the second."""
    x, g = data()
    mine, _ = twins()
    y = mine(minidl.tensor(x, requires_grad=True))
    with launches() as full:
        y.backward(minidl.tensor(g))
    mine, _ = twins()
    mx = minidl.tensor(x, requires_grad=True)
    y = mine(mx)
    with launches() as first:
        _, weight_pass = split_backward([y], [mx], [minidl.tensor(g)])
    with launches() as second:
        weight_pass()
    # a fused norm's backward runs in both halves, each for its own share: dx in the first, the weight and bias
    # sums in the second (one launch for all three in a full backward)
    fused = "norm_rows_backward"
    assert first[fused] == second[fused] == full[fused] > 0
    first[fused] = second[fused] = 0
    assert first + second == full - Counter({fused: full[fused]})
    matmuls = full["matmul"]   # q/k/v, the scores, the values, the output map and the two MLP layers
    assert first["matmul"] > 0 and second["matmul"] == 4 and first["matmul"] + 4 == matmuls


def test_narrowed_passes_launch_only_what_they_need():
    """autograd.grad of the input alone skips the weights' products; without inputs, the whole
    backward is the weight pass (a pipeline's first stage)."""
    net = minidl.nn.Sequential(minidl.nn.Linear(4, 4), minidl.nn.Tanh(), minidl.nn.Linear(4, 2))
    x = minidl.randn(3, 4, requires_grad=True)
    loss = net(x).sum()
    with launches() as counts:
        minidl.autograd.grad(loss, x)
    assert counts["matmul"] == 2 and all(p.grad is None for p in net.parameters())
    loss = net(x).sum()
    grads, weight_pass = split_backward([loss], [])
    assert grads == () and all(p.grad is None for p in net.parameters()) and x.grad is None
    weight_pass()   # every leaf that is not an input: here x too
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in net.state_dict().items()})
    tx = torch.from_numpy(x.detach().numpy().copy()).requires_grad_()
    theirs(tx).sum().backward()
    for mine, want in zip([x] + list(net.parameters()), [tx] + list(theirs.parameters())):
        np.testing.assert_allclose(mine.grad.numpy(), want.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_hooks_fire_once_in_the_pass_that_computes_their_gradient():
    lin = minidl.nn.Linear(3, 3).double()
    x = minidl.randn(2, 3, dtype=minidl.float64, requires_grad=True)
    seen = []
    lin.weight.register_post_accumulate_grad_hook(lambda p: seen.append("weight"))
    h = lin(x)
    h.register_hook(lambda grad: seen.append("h") or grad * 2)   # doubles what both halves see
    (gx,), weight_pass = split_backward([h.tanh().sum()], [x])
    assert seen == ["h"]
    weight_pass()
    assert seen == ["h", "weight"]
    dh = 2 * (1 - h.detach().tanh() ** 2)
    np.testing.assert_allclose(gx.numpy(), (dh @ lin.weight.detach()).numpy())
    np.testing.assert_allclose(lin.weight.grad.numpy(), (dh.t() @ x.detach()).numpy())
    with pytest.raises(RuntimeError, match="this weight pass already ran"):
        weight_pass()


def test_the_input_pass_frees_what_the_weight_pass_does_not_need():
    lin = minidl.nn.Linear(3, 3)
    x = minidl.randn(2, 3, requires_grad=True)
    y = lin(x).tanh()
    tanh_node, linear_node = y.grad_fn, y.grad_fn.next_functions[0][0]
    _, weight_pass = split_backward([y.sum()], [x])
    assert tanh_node._released and not linear_node._released   # (autograd's node internals)
    weight_pass()
    assert linear_node._released
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()


def test_outputs_inputs_and_roots_of_every_kind():
    """A non-leaf input, an input the outputs do not reach, and an output that reaches no input."""
    w = minidl.tensor([1.5, -2.0], requires_grad=True)
    x = minidl.tensor([0.5, 3.0], requires_grad=True)
    h = x * 2                                       # a non-leaf input
    unused = minidl.tensor([1.0], requires_grad=True)
    y, z = (h * w).sum(), (w * w).sum()             # z reaches no input
    (gh, gu), weight_pass = split_backward([y, z], [h, unused])
    assert gu is None and x.grad is None
    np.testing.assert_allclose(gh.numpy(), [1.5, -2.0])
    weight_pass()
    np.testing.assert_allclose(w.grad.numpy(), [1.0 + 3.0, 6.0 - 4.0])   # h + 2w
    np.testing.assert_allclose(x.grad.numpy(), [3.0, -4.0])   # the rest of backward: below h too


def test_a_narrowed_pass_does_not_narrow_another_threads_pass():
    """The narrowing is per call and per thread: a full backward running meanwhile on the same
    graph (retain_graph) still gets every gradient."""
    class Slow(minidl.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            need = ctx.needs_input_grad
            time.sleep(0.05)   # (the other thread's pass runs the same node meanwhile)
            return g * b if need[0] else None, g * a if need[1] else None
    x, w = minidl.ones(3, requires_grad=True), minidl.full((3,), 2.0, requires_grad=True)
    y = Slow.apply(x, w).sum()
    found = []
    other = threading.Thread(target=lambda: found.extend(minidl.autograd.grad(y, x, retain_graph=True)))
    other.start()
    time.sleep(0.01)
    y.backward(retain_graph=True)
    other.join()
    np.testing.assert_allclose(found[0].numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 1.0, 1.0])
