"""Conv / pool / norm modules against PyTorch: forward and every gradient, weights copied by state_dict name."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import minidl  # noqa: E402
import minidl.nn as nn  # noqa: E402
import minidl.nn.functional as F  # noqa: E402

TOL = dict(rtol=1e-6, atol=1e-6)


def _copy_state(ours, theirs):
    state = {k: v for k, v in theirs.state_dict().items()}
    for name, t in ours.state_dict().items():
        assert name in state, name
        src = state[name].detach().numpy()
        with minidl.no_grad():
            t.copy_(minidl.tensor(src, dtype=t.dtype))
    assert set(ours.state_dict()) == set(state)


def _compare(make_ours, make_theirs, shape, train=True, steps=1, seed=0):
    torch.manual_seed(seed)
    theirs = make_theirs().double()
    ours = make_ours()
    ours.to(minidl.float64) if hasattr(ours, "to") else None
    _copy_state(ours, theirs)
    ours.train(train)
    theirs.train(train)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x = rng.standard_normal(shape)
        xt = torch.tensor(x, requires_grad=True)
        xm = minidl.tensor(x, requires_grad=True)
        yt, ym = theirs(xt), ours(xm)
        if isinstance(yt, tuple):
            np.testing.assert_array_equal(ym[1].numpy(), yt[1].numpy())
            yt, ym = yt[0], ym[0]
        np.testing.assert_allclose(ym.detach().numpy(), yt.detach().numpy(), **TOL)
        u = rng.standard_normal(tuple(yt.shape))
        (yt * torch.tensor(u)).sum().backward()
        (ym * minidl.tensor(u)).sum().backward()
        np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), **TOL)
    params_t = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), params_t[name].grad.numpy(), err_msg=name, **TOL)
    buffers_t = dict(theirs.named_buffers())
    for name, b in ours.named_buffers():
        np.testing.assert_allclose(b.numpy().astype(np.float64), buffers_t[name].numpy().astype(np.float64),
                                   err_msg=name, **TOL)


CONV2D = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(1, 2), padding=(2, 0), dilation=(2, 1), groups=2),
    dict(padding="same", dilation=2, bias=False),
    dict(padding="same", groups=4),
    dict(padding="valid", stride=3, groups=2),
    dict(padding=(2, 1), padding_mode="reflect"),
    dict(padding=1, stride=2, padding_mode="replicate"),
    dict(padding="same", dilation=(1, 2), padding_mode="circular"),
]


@pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning")  # torch's note on its own copy
@pytest.mark.parametrize("kw", CONV2D, ids=str)
def test_conv2d(kw):
    k = (3, 2) if kw.get("padding") != "same" else (2, 3)
    _compare(lambda: nn.Conv2d(4, 8, k, **kw), lambda: torch.nn.Conv2d(4, 8, k, **kw), (2, 4, 9, 8))
    assert repr(nn.Conv2d(4, 8, k, **kw)) == repr(torch.nn.Conv2d(4, 8, k, **kw))


@pytest.mark.parametrize("kw", [dict(), dict(bias=False), dict(stride=2), dict(stride=(1, 3)), dict(padding=1),
                                dict(groups=2)], ids=str)
@pytest.mark.parametrize("size", [(7, 7), (12, 10), (20, 13), (24, 22)], ids=str)
def test_pointwise_conv2d(kw, size):
    """1x1 convolutions: below 100 positions an image through the columns, from 100 up (without padding or
    groups) as one product per image (ops/conv.py's _pointwise), strided ones over every stride-th pixel."""
    _compare(lambda: nn.Conv2d(4, 6, 1, **kw), lambda: torch.nn.Conv2d(4, 6, 1, **kw), (3, 4, *size), steps=2)


def test_conv1d_circular_padding_and_padding_mode_errors():
    kw = dict(padding=2, padding_mode="circular")
    _compare(lambda: nn.Conv1d(3, 4, 3, **kw), lambda: torch.nn.Conv1d(3, 4, 3, **kw), (2, 3, 7))
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        nn.Conv2d(1, 1, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match='Only "zeros" padding mode is supported for ConvTranspose2d'):
        nn.ConvTranspose2d(1, 1, 3, padding_mode="reflect")


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=2, dilation=2, groups=2), dict(padding="same")],
                         ids=str)
def test_conv1d(kw):
    _compare(lambda: nn.Conv1d(4, 6, 3, **kw), lambda: torch.nn.Conv1d(4, 6, 3, **kw), (2, 4, 11))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1),
                                dict(stride=(2, 3), padding=(0, 1), output_padding=(1, 2), groups=2, dilation=(2, 1)),
                                dict(stride=1, padding=1, dilation=3, output_padding=2, bias=False)], ids=str)
def test_conv_transpose2d(kw):
    _compare(lambda: nn.ConvTranspose2d(4, 6, (3, 2), **kw), lambda: torch.nn.ConvTranspose2d(4, 6, (3, 2), **kw),
             (2, 4, 5, 4))


def test_float16_conv2d_and_linear_with_bias():
    """float16 operands in, float16 out, as PyTorch's CPU ops (computed in float32 here)."""
    rng = np.random.RandomState(0)
    x, w, b = (rng.randn(*s).astype(np.float16) for s in ((2, 3, 5, 5), (4, 3, 3, 3), (4,)))
    ours = F.conv2d(minidl.tensor(x), minidl.tensor(w), minidl.tensor(b), padding=1)
    theirs = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1)
    assert ours.dtype is minidl.float16
    np.testing.assert_allclose(ours.float().numpy(), theirs.float().numpy(), rtol=2e-3, atol=2e-3)
    x, w = x.reshape(2, -1)[:, :27], w.reshape(4, -1)
    ours = F.linear(minidl.tensor(x), minidl.tensor(w), minidl.tensor(b))
    theirs = torch.nn.functional.linear(torch.tensor(x), torch.tensor(w), torch.tensor(b))
    assert ours.dtype is minidl.float16
    np.testing.assert_allclose(ours.float().numpy(), theirs.float().numpy(), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=(2, 3), stride=(1, 2), dilation=(2, 1), return_indices=True),
                                dict(kernel_size=3, stride=2, dilation=2, padding=1, ceil_mode=True,
                                     return_indices=True)], ids=str)
def test_max_pool2d(kw):
    _compare(lambda: nn.MaxPool2d(**kw), lambda: torch.nn.MaxPool2d(**kw), (2, 3, 9, 8))


@pytest.mark.parametrize("kw", [dict(kernel_size=2, ceil_mode=True), dict(kernel_size=3, stride=2, ceil_mode=True)],
                         ids=str)
def test_max_pool2d_window_hanging_over_the_edge(kw):
    """ceil_mode's last window reaches past an odd-sized input without padding: only the elements
    inside count (the dense fast paths once read past the plane)."""
    _compare(lambda: nn.MaxPool2d(**kw), lambda: torch.nn.MaxPool2d(**kw), (2, 3, 5, 7))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
                                dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1), divisor_override=5)],
                         ids=str)
def test_avg_pool2d(kw):
    _compare(lambda: nn.AvgPool2d(**kw), lambda: torch.nn.AvgPool2d(**kw), (2, 3, 8, 9))


@pytest.mark.parametrize("size", [1, (3, 4), (None, 2), (5, 7)], ids=str)
def test_adaptive_avg_pool2d(size):
    _compare(lambda: nn.AdaptiveAvgPool2d(size), lambda: torch.nn.AdaptiveAvgPool2d(size), (2, 3, 7, 9))


_irng = np.random.default_rng(37)
INTEGER_CASES = [  # (name, fn(F, *inputs), input shapes, dtypes PyTorch computes it in on the CPU)
    ("conv2d", lambda F, x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1), [(2, 3, 6, 5), (4, 3, 3, 2), (4,)],
     ("int64", "int32", "uint8")),
    ("conv2d-groups-dilation-unbatched", lambda F, x, w: F.conv2d(x, w, groups=3, dilation=2, padding=(1, 2)),
     [(3, 6, 5), (6, 1, 2, 2)], ("int64",)),
    ("conv1d", lambda F, x, w, b: F.conv1d(x, w, b, stride=2, padding=1), [(2, 3, 7), (4, 3, 3), (4,)],
     ("int64", "int32")),
    ("conv_transpose2d", lambda F, x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
     [(2, 3, 4, 5), (3, 2, 3, 2), (2,)], ("int64",)),
    ("conv_transpose2d-groups", lambda F, x, w: F.conv_transpose2d(x, w, groups=3), [(2, 3, 4, 5), (3, 1, 2, 2)],
     ("int64",)),
    ("max_pool2d", lambda F, x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True), [(2, 3, 6, 5)],
     ("int64", "int32", "uint8")),
    ("max_pool2d-2x2-dilation-ceil", lambda F, x: (F.max_pool2d(x, 2), F.max_pool2d(x, 2, 2, 1, (1, 2), True)),
     [(2, 3, 6, 5)], ("int64", "uint8")),
    ("avg_pool2d", lambda F, x: (F.avg_pool2d(x, 2), F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 2, ceil_mode=True)),
     [(2, 3, 6, 5)], ("int64",)),
    ("avg_pool2d-count-divisor", lambda F, x: (F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                                               F.avg_pool2d(x, 2, divisor_override=3)), [(2, 3, 6, 5)], ("int64",)),
]


@pytest.mark.parametrize("case", [(c, d) for c in INTEGER_CASES for d in c[3]], ids=lambda c: f"{c[0][0]}-{c[1]}")
def test_integer_conv_and_pool_match_torch(case):
    """Exact integer results in the input's dtype (an average truncates; uint8 wraps as PyTorch's does)."""
    (name, fn, shapes, _), dtype = case
    low = 0 if dtype == "uint8" else -9
    arrays = [_irng.integers(low, 10, s) for s in shapes]
    expected = fn(torch.nn.functional, *(torch.tensor(a).to(getattr(torch, dtype)) for a in arrays))
    out = fn(F, *(minidl.tensor(a).to(getattr(minidl, dtype)) for a in arrays))
    pairs = zip(out, expected) if isinstance(out, tuple) else [(out, expected)]
    for o, e in pairs:
        assert o.dtype.name == str(e.dtype).replace("torch.", ""), name
        np.testing.assert_array_equal(o.numpy(), e.numpy(), err_msg=name)


def test_integer_adaptive_avg_pool2d_raises_as_in_torch():
    """The averaging matrices of an integer input would truncate to zeros: refused, as PyTorch refuses it."""
    with pytest.raises(NotImplementedError):
        torch.nn.functional.adaptive_avg_pool2d(torch.ones(1, 1, 4, 4, dtype=torch.int64), 2)
    with pytest.raises(NotImplementedError, match="adaptive_avg_pool2d: not implemented for int64"):
        F.adaptive_avg_pool2d(minidl.ones(1, 1, 4, 4, dtype=minidl.int64), 2)


@pytest.mark.parametrize("kw", [dict(), dict(momentum=None), dict(affine=False, momentum=0.3),
                                dict(track_running_stats=False)], ids=str)
@pytest.mark.parametrize("train", [True, False])
def test_batch_norm2d(kw, train):
    _compare(lambda: nn.BatchNorm2d(3, **kw), lambda: torch.nn.BatchNorm2d(3, **kw), (4, 3, 3, 2), train, steps=3)


@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 6)])
def test_batch_norm1d(shape):
    _compare(lambda: nn.BatchNorm1d(3), lambda: torch.nn.BatchNorm1d(3), shape, True, steps=2)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm(groups):
    _compare(lambda: nn.GroupNorm(groups, 4), lambda: torch.nn.GroupNorm(groups, 4), (2, 4, 3, 5))


@pytest.mark.parametrize("make, shape", [("BatchNorm1d", (0, 3)), ("BatchNorm1d", (0, 3, 4)),
                                         ("BatchNorm1d", (2, 3, 0)), ("BatchNorm2d", (0, 3, 2, 2))], ids=str)
def test_batch_norm_training_on_no_values(make, shape):
    """An empty batch in training mode: an empty result, zero parameter gradients, the running statistics
    kept (PyTorch's); a single value per channel still raises."""
    _compare(lambda: getattr(nn, make)(3), lambda: getattr(torch.nn, make)(3), shape, True)
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when training, got input size "
                                         r"\[1, 3, 1\]"):
        nn.BatchNorm1d(3)(minidl.ones(1, 3, 1))


@pytest.mark.parametrize("shape", [(0, 4), (0, 4, 3, 2)], ids=str)
def test_group_norm_of_an_empty_batch(shape):
    _compare(lambda: nn.GroupNorm(2, 4), lambda: torch.nn.GroupNorm(2, 4), shape)


def test_lenet_end_to_end():
    def lenet(m):
        return m.Sequential(m.Conv2d(1, 6, 5, padding=2), m.ReLU(), m.MaxPool2d(2), m.Conv2d(6, 16, 5), m.ReLU(),
                            m.AvgPool2d(2), m.Flatten(), m.Linear(16 * 25, 10))
    _compare(lambda: lenet(nn), lambda: lenet(torch.nn), (2, 1, 28, 28))


def test_default_init_matches_torch_bounds():
    conv = nn.Conv2d(6, 16, 5)
    bound = 1 / np.sqrt(6 * 25)
    w, b = conv.weight.detach().numpy(), conv.bias.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.abs(b).max() <= bound
    ct = nn.ConvTranspose2d(6, 4, 3, groups=2)
    assert tuple(ct.weight.shape) == tuple(torch.nn.ConvTranspose2d(6, 4, 3, groups=2).weight.shape)


def test_functional_unfold_fold_match_torch():
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 5))
    got = F.unfold(minidl.tensor(x), (2, 3), stride=(2, 1), padding=1, dilation=(1, 2))
    ref = torch.nn.functional.unfold(torch.tensor(x), (2, 3), stride=(2, 1), padding=1, dilation=(1, 2))
    np.testing.assert_allclose(got.numpy(), ref.numpy(), **TOL)
    back = F.fold(got, (6, 5), (2, 3), stride=(2, 1), padding=1, dilation=(1, 2))
    ref_back = torch.nn.functional.fold(ref, (6, 5), (2, 3), stride=(2, 1), padding=1, dilation=(1, 2))
    np.testing.assert_allclose(back.numpy(), ref_back.numpy(), **TOL)


@pytest.mark.parametrize("shape", [(1, 1, 5, 5), (1, 1, 4, 4), (2, 5, 4)])
def test_unfold_fold_positional_order_and_unbatched_input_match_torch(shape):
    """torch's positional order is (kernel_size, dilation, padding, stride); fold takes output_size first."""
    x = np.random.default_rng(2).standard_normal(shape)
    got = F.unfold(minidl.tensor(x), 2, 1, 0, 2)
    ref = torch.nn.functional.unfold(torch.tensor(x), 2, 1, 0, 2)
    assert tuple(got.shape) == tuple(ref.shape)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), **TOL)
    back = F.fold(got, shape[-2:], 2, 1, 0, 2)
    ref_back = torch.nn.functional.fold(ref, shape[-2:], 2, 1, 0, 2)
    assert tuple(back.shape) == tuple(ref_back.shape)
    np.testing.assert_allclose(back.numpy(), ref_back.numpy(), **TOL)
