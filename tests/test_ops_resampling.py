"""Resampling against PyTorch where op_db's samples do not look: antialiased interpolation (float and uint8),
torch's identity and rounding corners, affine_grid (op_db has no entry), grid_sample's 5-D gradients, the
deprecated aliases' warnings, the modules, the errors (type and message as torch's), and ONNX exports that
take the lowerings' other paths (per-axis MatMul, opset 18)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F

from cuda_support import cuda_device

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _pair(values, dtype=np.float64, grad=True):
    """The same values as a minidl and a torch tensor (leaves requiring grad when float)."""
    values = np.asarray(values, dtype=dtype)
    ours, theirs = minidl.tensor(values), torch.tensor(values)
    if grad:
        ours.requires_grad_(True)
        theirs.requires_grad_(True)
    return ours, theirs


def _check_value_and_grads(ours_fn, theirs_fn, *arrays, rtol=1e-12, atol=1e-12, torch_grad=True):
    """Values as torch's; gradients as torch's, or (torch_grad=False) as central differences of ours."""
    pairs = [_pair(a) for a in arrays]
    y, ty = ours_fn(*[p[0] for p in pairs]), theirs_fn(*[p[1] for p in pairs])
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=rtol, atol=atol)
    cot = np.random.default_rng(1).standard_normal(tuple(ty.shape))
    y.backward(minidl.tensor(cot))
    ty.backward(torch.tensor(cot))
    for k, (ours, theirs) in enumerate(pairs):
        got = np.zeros(tuple(theirs.shape)) if ours.grad is None else ours.grad.numpy()
        want = theirs.grad.numpy() if torch_grad else _central_difference(ours_fn, arrays, k, cot)
        np.testing.assert_allclose(got, want, rtol=1e-7 if not torch_grad else rtol, atol=1e-7 if not torch_grad
                                   else atol)


def _central_difference(fn, arrays, k, cot, eps=1e-6):
    """d(sum(cot * fn(arrays))) / d(arrays[k]), element by element (small inputs only)."""
    grad = np.zeros_like(arrays[k])
    for i in np.ndindex(arrays[k].shape):
        values = []
        for sign in (1, -1):
            moved = [np.array(a, dtype=np.float64) for a in arrays]
            moved[k][i] += sign * eps
            values.append((fn(*[minidl.tensor(a) for a in moved]).numpy() * cot).sum())
        grad[i] = (values[0] - values[1]) / (2 * eps)
    return grad


RNG = np.random.default_rng(0)
IMAGE = RNG.standard_normal((2, 3, 9, 7))

ANTIALIASED = [dict(size=(4, 3), mode="bilinear"), dict(size=(2, 5), mode="bicubic"),
               dict(scale_factor=0.45, mode="bilinear"), dict(scale_factor=(0.3, 1.6), mode="bicubic"),
               dict(size=(4, 3), mode="bicubic", align_corners=True), dict(size=(4, 3), mode="lanczos"),
               dict(scale_factor=(0.3, 2.5), mode="lanczos")]


@pytest.mark.parametrize("kwargs", ANTIALIASED, ids=str)
def test_antialiased_interpolation_matches_torch(kwargs):
    """antialias=True: the widened filter (support scaled by the step; PIL's a = -0.5 for bicubic), its
    weights normalised per output, an axis of unchanged size left alone; values and gradient."""
    _check_value_and_grads(lambda x: F.interpolate(x, antialias=True, **kwargs),
                           lambda x: TF.interpolate(x, antialias=True, **kwargs), IMAGE)


@pytest.mark.parametrize("kwargs", [dict(size=(13, 5), mode="bilinear"), dict(scale_factor=(0.4, 1.3), mode="bicubic"),
                                    dict(size=(3, 4), mode="bicubic", antialias=True),
                                    dict(size=(5, 6), mode="bilinear", antialias=True, align_corners=True),
                                    dict(size=(4, 9), mode="bicubic", align_corners=True),
                                    dict(size=(3, 12), mode="lanczos", antialias=True)], ids=str)
def test_uint8_interpolation_is_exactly_torchs(kwargs):
    """uint8 bilinear/bicubic: aten's fixed-point weights and per-axis rounding give these exact bytes."""
    values = np.random.default_rng(2).integers(0, 256, (2, 3, 8, 7)).astype(np.uint8)
    got = F.interpolate(minidl.tensor(values), **kwargs)
    want = TF.interpolate(torch.tensor(values), **kwargs)
    assert got.dtype is minidl.uint8
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_uint8_interpolation_on_cuda_is_the_cpus():
    """The fixed-point passes and nearest's gather of bytes on device 'cuda' (registry samples are float)."""
    cuda_device()
    values = np.random.default_rng(4).integers(0, 256, (1, 2, 6, 5)).astype(np.uint8)
    for kwargs in (dict(size=(4, 7), mode="bicubic"), dict(size=(3, 2), mode="bilinear", antialias=True),
                   dict(scale_factor=1.5, mode="nearest-exact")):
        got = F.interpolate(minidl.tensor(values, device="cuda"), **kwargs)
        assert got.device.type == "cuda" and got.dtype is minidl.uint8
        np.testing.assert_array_equal(got.cpu().numpy(), TF.interpolate(torch.tensor(values), **kwargs).numpy())


@pytest.mark.parametrize("kwargs", [dict(scale_factor=1.1, mode="bilinear"), dict(scale_factor=1.24, mode="nearest"),
                                    dict(size=(1, 1), mode="bilinear"),
                                    dict(size=(1, 5), mode="bicubic", align_corners=True),
                                    dict(scale_factor=2.0, mode="nearest-exact"), dict(size=(18, 1), mode="area")],
                         ids=str)
def test_interpolation_corners_match_torch(kwargs):
    """A scale that leaves a size unchanged (linear copies, bicubic still shifts), output size 1,
    nearest's float32 index arithmetic, area as adaptive averaging."""
    _check_value_and_grads(lambda x: F.interpolate(x, **kwargs), lambda x: TF.interpolate(x, **kwargs), IMAGE)


BAD_INTERPOLATE = [
    dict(size=3, mode="nearest", align_corners=False), dict(size=(3, 3, 3)), dict(size=3, scale_factor=2.0),
    dict(), dict(size=3, recompute_scale_factor=True), dict(scale_factor=(2.0,)), dict(size=3, mode="linear"),
    dict(size=3, mode="trilinear"), dict(size=3, mode="nearest", antialias=True), dict(size=3, mode="cubic"),
    dict(size=0), dict(size=(2.5, 3)), dict(size=3, mode="lanczos"),
    dict(size=3, mode="lanczos", antialias=True, align_corners=True),
]


@pytest.mark.parametrize("kwargs", BAD_INTERPOLATE, ids=str)
@pytest.mark.parametrize("ndim", [3, 4])
def test_interpolate_refuses_what_torch_refuses(kwargs, ndim):
    """The same error type as torch's, and the same message for those its Python code raises (aten's own
    messages differ in form; ours name the op and sizes). What torch computes (on 3-D) we compute alike."""
    ours, theirs = _pair(IMAGE if ndim == 4 else IMAGE[0], grad=False)
    try:
        want = TF.interpolate(theirs, **kwargs)
    except Exception as error:      # noqa: BLE001 (any error torch raises is the oracle)
        with pytest.raises(type(error)) as got:
            F.interpolate(ours, **kwargs)
        if not isinstance(error, RuntimeError):
            assert str(got.value) == str(error)
    else:
        np.testing.assert_allclose(F.interpolate(ours, **kwargs).numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "area"])
def test_interpolate_names_the_dtype_it_cannot_take(mode):
    x = minidl.tensor(np.ones((1, 1, 4, 4), np.int64))
    with pytest.raises(NotImplementedError, match="int64"):
        F.interpolate(x, size=3, mode=mode)
    with pytest.raises(NotImplementedError):
        TF.interpolate(torch.ones(1, 1, 4, 4, dtype=torch.int64), size=3, mode=mode)


def test_deprecated_aliases_warn_and_interpolate():
    ours, theirs = _pair(IMAGE, grad=False)
    for name, kwargs in (("upsample", dict(scale_factor=1.5, mode="bicubic")), ("upsample_nearest", dict(size=5)),
                         ("upsample_bilinear", dict(scale_factor=0.6))):
        with pytest.warns(UserWarning, match=f"nn.functional.{name}` is deprecated"):
            got = getattr(F, name)(ours, **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = getattr(TF, name)(theirs, **kwargs)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_star_import_of_nn_functional_has_the_resampling_functions():
    names = {}
    exec("from minidl.nn.functional import *", names)   # (torch's functional module exports them all)
    for name in ("interpolate", "grid_sample", "affine_grid", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle",
                 "upsample", "upsample_nearest", "upsample_bilinear"):
        assert names[name] is getattr(F, name) and callable(getattr(TF, name))


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_5d_gradients_match_torch(mode, padding_mode):
    """Volumes (op_db's 5-D samples check values): gradients of input and grid, points outside included."""
    volume = RNG.standard_normal((2, 2, 3, 4, 5))
    grid = RNG.uniform(-1.4, 1.4, (2, 2, 3, 2, 3))
    for align in (False, True):
        _check_value_and_grads(lambda x, g: F.grid_sample(x, g, mode, padding_mode, align),
                               lambda x, g: TF.grid_sample(x, g, mode, padding_mode, align), volume, grid)


@pytest.mark.parametrize("padding_mode", ["border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_grid_sample_points_on_the_edge_have_torchs_grid_gradient(mode, padding_mode):
    """The grid of an identity affine_grid with align_corners (its corner points exactly on the edges, where
    torch's clipping gives the grid no gradient), and points just inside and outside them."""
    identity = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    grid = TF.affine_grid(torch.tensor(identity), (1, 1, 3, 4), align_corners=True).numpy()
    grid = np.concatenate([grid, grid * 1.01, grid * 0.99], axis=2)
    _check_value_and_grads(lambda x, g: F.grid_sample(x, g, mode, padding_mode, True),
                           lambda x, g: TF.grid_sample(x, g, mode, padding_mode, True), IMAGE[:1, :2, :3, :4], grid)


def test_grid_sample_and_affine_grid_warn_without_align_corners():
    theta, _ = _pair(RNG.standard_normal((1, 2, 3)), grad=False)
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        grid = F.affine_grid(theta, (1, 1, 3, 3))
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        F.grid_sample(minidl.ones(1, 1, 3, 3, dtype=minidl.float64), grid)


@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid")   # (unit sides, as torch's, warn)
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 1, 1, 3), (2, 1, 2, 4, 3), (1, 2, 3, 1, 1)], ids=str)
@pytest.mark.parametrize("align", [False, True])
def test_affine_grid_matches_torch(size, align):
    """affine_grid (no op_db entry): values and theta's gradient, sides of one point included."""
    rank = len(size) - 2
    theta = RNG.standard_normal((size[0], rank, rank + 1))
    _check_value_and_grads(lambda t: F.affine_grid(t, size, align), lambda t: TF.affine_grid(t, size, align), theta)


def test_affine_grid_then_grid_sample_is_a_rotation():
    """theta = [[0, -1], [1, 0]] reads input (x, y) = (-y, x) for output (x, y): a quarter turn counter-clockwise
    of the image, each pixel moved whole (pixel centres map onto pixel centres)."""
    image = minidl.arange(16, dtype=minidl.float64).reshape(1, 1, 4, 4)
    theta = minidl.tensor([[[0.0, -1.0, 0.0], [1.0, 0.0, 0.0]]], dtype=minidl.float64)
    out = F.grid_sample(image, F.affine_grid(theta, (1, 1, 4, 4), align_corners=False), align_corners=False)
    np.testing.assert_allclose(out.numpy()[0, 0], np.rot90(image.numpy()[0, 0]), atol=1e-12)


BAD_GRID = [
    (lambda: F.grid_sample(minidl.ones(1, 1, 3, 3), minidl.ones(1, 2, 2, 2), mode="foo"), ValueError, "mode"),
    (lambda: F.grid_sample(minidl.ones(1, 1, 3, 3), minidl.ones(1, 2, 2, 2), padding_mode="foo"), ValueError,
     "padding_mode"),
    (lambda: F.grid_sample(minidl.ones(1, 1, 3, 3, 3), minidl.ones(1, 2, 2, 2, 3), mode="bicubic",
                           align_corners=False), RuntimeError, "bicubic interpolation only supports 4D"),
    (lambda: F.grid_sample(minidl.ones(1, 1, 3, 3), minidl.ones(1, 2, 2, 3), align_corners=False), RuntimeError,
     r"size 2 in last dimension.*\[1, 2, 2, 3\]"),
    (lambda: F.grid_sample(minidl.ones(1, 1, 3, 3), minidl.ones(2, 2, 2, 2), align_corners=False), RuntimeError,
     "same batch size"),
    (lambda: F.grid_sample(minidl.ones(1, 1, 3, 3), minidl.ones(1, 2, 2, 2, dtype=minidl.float64),
                           align_corners=False), RuntimeError, "float32.*float64"),
    (lambda: F.affine_grid(minidl.ones(1, 2, 3), (1, 1, 3), align_corners=False), NotImplementedError,
     "only supports 4D and 5D sizes"),
    (lambda: F.affine_grid(minidl.ones(1, 3, 4), (1, 1, 3, 3), align_corners=False), ValueError,
     r"shape Nx2x3 for size \(1, 1, 3, 3\)"),
    (lambda: F.affine_grid(minidl.ones(1, 2, 3, dtype=minidl.int64), (1, 1, 3, 3), align_corners=False),
     ValueError, "floating point"),
    (lambda: F.pixel_shuffle(minidl.ones(1, 4, 2, 2), 3), RuntimeError, r"input.size\(-3\)=4 is not divisible by 9"),
    (lambda: F.pixel_shuffle(minidl.ones(1, 4, 2, 2), 0), RuntimeError, "positive upscale_factor, but got 0"),
    (lambda: F.pixel_shuffle(minidl.ones(4, 2), 1), RuntimeError, "at least 3 dimensions"),
    (lambda: F.pixel_unshuffle(minidl.ones(1, 1, 3, 4), 2), RuntimeError, r"height .* input.size\(-2\)=3"),
    (lambda: F.pixel_unshuffle(minidl.ones(1, 1, 4, 3), 2), RuntimeError, r"width .* input.size\(-1\)=3"),
    (lambda: F.channel_shuffle(minidl.ones(1, 3, 2), 2), RuntimeError, "Got 3 channels and 2 groups"),
    (lambda: F.channel_shuffle(minidl.ones(1, 4, 2), 0), RuntimeError, "must be positive"),
    (lambda: F.channel_shuffle(minidl.ones(1, 4), 2), RuntimeError, r"> 2 dims.*\[1, 4\]"),
    (lambda: F.pixel_shuffle(minidl.ones(1, 4, 2, 2), 2.0), TypeError, "'upscale_factor' must be int, not float"),
    (lambda: F.pixel_unshuffle(minidl.ones(1, 1, 4, 4), True), TypeError, "'downscale_factor' must be int, not bool"),
    (lambda: F.channel_shuffle(minidl.ones(1, 4, 2), 2.5), TypeError, "argument 'groups' must be int, not float"),
]


@pytest.mark.parametrize("case", range(len(BAD_GRID)))
def test_bad_arguments_raise_torchs_errors(case):
    fn, kind, message = BAD_GRID[case]
    with pytest.raises(kind, match=message):
        fn()


def test_modules_match_torch():
    x, tx = _pair(IMAGE, grad=False)
    cases = [(nn.Upsample(scale_factor=2), torch.nn.Upsample(scale_factor=2)),
             (nn.Upsample(size=(4, 5), mode="bicubic", align_corners=True),
              torch.nn.Upsample(size=(4, 5), mode="bicubic", align_corners=True)),
             (nn.Upsample(scale_factor=(0.5, 1.5), mode="bilinear", recompute_scale_factor=True),
              torch.nn.Upsample(scale_factor=(0.5, 1.5), mode="bilinear", recompute_scale_factor=True)),
             (nn.UpsamplingNearest2d(size=5), torch.nn.UpsamplingNearest2d(size=5)),
             (nn.UpsamplingBilinear2d(scale_factor=1.5), torch.nn.UpsamplingBilinear2d(scale_factor=1.5)),
             (nn.ChannelShuffle(3), torch.nn.ChannelShuffle(3)),
             (nn.Sequential(nn.PixelUnshuffle(1), nn.PixelShuffle(1)),
              torch.nn.Sequential(torch.nn.PixelUnshuffle(1), torch.nn.PixelShuffle(1)))]
    for ours, theirs in cases:
        assert repr(ours) == repr(theirs)
        assert list(ours.state_dict()) == list(theirs.state_dict()) == []
        np.testing.assert_allclose(ours(x).numpy(), theirs(tx).numpy(), rtol=1e-12, atol=1e-12)
    y = RNG.standard_normal((2, 8, 4, 6))
    for factor in (2,):
        np.testing.assert_array_equal(nn.PixelShuffle(factor)(minidl.tensor(y)).numpy(),
                                      torch.nn.PixelShuffle(factor)(torch.tensor(y)).numpy())
        np.testing.assert_array_equal(nn.PixelUnshuffle(factor)(minidl.tensor(y)).numpy(),
                                      torch.nn.PixelUnshuffle(factor)(torch.tensor(y)).numpy())
    assert repr(nn.PixelUnshuffle(3)) == repr(torch.nn.PixelUnshuffle(3))
    assert nn.modules.upsampling.Upsample is nn.Upsample
    assert nn.modules.channelshuffle.ChannelShuffle is nn.ChannelShuffle


@pytest.mark.parametrize("kwargs", [dict(scale_factor=1.1, mode="bicubic"),
                                    dict(scale_factor=(1.2, 0.5), mode="bilinear", antialias=True)], ids=str)
def test_an_unchanged_size_under_a_scale_has_the_gradient_of_its_forward(kwargs):
    """A scale that leaves a size unchanged: bicubic still shifts by it, antialiasing copies the axis (torch's
    values); torch's backward then differs from its own forward (copies, resp. shifts), so the gradient's oracle
    here is central differences."""
    image = IMAGE[:1, :1, :3, :6]
    _check_value_and_grads(lambda x: F.interpolate(x, **kwargs), lambda x: TF.interpolate(x, **kwargs), image,
                           torch_grad=False)


# ----------------------------------------------------------------------------- ONNX
def _onnx_matches(fn, *inputs, opset=None):
    ort = pytest.importorskip("onnxruntime")
    options = {} if opset is None else {"opset_version": opset}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = minidl.onnx.export(fn, inputs, output_names=["out"], **options)
    session = ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
    got = session.run(None, feeds)[0]
    np.testing.assert_allclose(got, fn(*inputs).numpy(), rtol=1e-5, atol=1e-5)
    return program


@pytest.mark.parametrize("kwargs", [dict(scale_factor=1.1, mode="bicubic"), dict(scale_factor=(0.6, 1.7)),
                                    dict(scale_factor=1.1, mode="nearest-exact"),
                                    dict(scale_factor=0.6, mode="nearest-exact"), dict(size=(1, 1), mode="bilinear"),
                                    dict(size=(4, 2), mode="bicubic", antialias=True),
                                    dict(size=(4, 2), mode="lanczos", antialias=True)], ids=str)
def test_interpolate_exports_as_eager_computes(kwargs):
    """Resize where it is torch's rule, MatMul of eager's weights where ONNX Runtime differs (an axis whose size
    a scale leaves unchanged) or has no such mode (antialiasing)."""
    _onnx_matches(lambda x: F.interpolate(x, **kwargs), minidl.tensor(IMAGE.astype(np.float32)))


def test_affine_grid_before_opset_20_is_a_matmul_and_5d_grid_sample_is_refused():
    theta = minidl.tensor(RNG.standard_normal((2, 3, 4)).astype(np.float32))
    program = _onnx_matches(lambda t: F.affine_grid(t, (2, 1, 2, 3, 4), align_corners=False), theta, opset=18)
    assert "AffineGrid" not in {n.op_type for n in program.model_proto.graph.node}
    volume = minidl.ones(1, 1, 2, 2, 2)
    grid = minidl.zeros(1, 1, 1, 1, 3)
    with pytest.raises(Exception, match="opset 20"):
        minidl.onnx.export(lambda x, g: F.grid_sample(x, g, align_corners=True), (volume, grid), opset_version=18)


def test_interpolate_by_a_scale_follows_dynamic_sizes_and_fixed_weights_warn():
    """Resize by torch's scale follows other input sizes; area's and antialiasing's weight matrices cannot."""
    ort = pytest.importorskip("onnxruntime")
    x = minidl.tensor(IMAGE.astype(np.float32))
    for mode in ("nearest", "bilinear", "bicubic"):
        def fn(v):
            return F.interpolate(v, scale_factor=(0.6, 1.7), mode=mode)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            program = minidl.onnx.export(fn, (x,), input_names=["x"], output_names=["out"],
                                         dynamic_axes={"x": {0: "b", 2: "h", 3: "w"}})
        session = ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
        other = np.random.default_rng(3).standard_normal((3, 3, 11, 6)).astype(np.float32)
        np.testing.assert_allclose(session.run(None, {"x": other})[0], fn(minidl.tensor(other)).numpy(), atol=1e-5)
    with pytest.warns(UserWarning, match="interpolate of a traced tensor"):
        minidl.onnx.export(lambda v: F.interpolate(v, size=3, mode="area"), (x,))


SHUFFLES = {   # name: (fn(F, x), traced shape, another shape)
    "pixel_shuffle": (lambda F, x: F.pixel_shuffle(x, 2), (8, 2, 3), (8, 5, 3)),
    "pixel_shuffle-4d": (lambda F, x: F.pixel_shuffle(x, 2), (2, 8, 2, 3), (5, 8, 4, 1)),
    "pixel_unshuffle": (lambda F, x: F.pixel_unshuffle(x, 2), (2, 2, 3, 4, 6), (1, 2, 3, 2, 8)),
    "channel_shuffle": (lambda F, x: F.channel_shuffle(x, 3), (2, 6, 3), (4, 6, 5)),
}


@pytest.mark.parametrize("name", list(SHUFFLES))
def test_shuffles_export_for_other_sizes(name):
    """The shuffles' graphs follow the sizes of another input (of the same channels), as torch computes it."""
    ort = pytest.importorskip("onnxruntime")
    fn, shape, other = SHUFFLES[name]
    axes = {d: f"d{d}" for d in range(len(shape)) if shape[d] != other[d]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (the divisibility checks read the traced sizes: fixed, as expected)
        program = minidl.onnx.export(lambda x: fn(F, x), (minidl.randn(*shape),), input_names=["x"],
                                     output_names=["out"], dynamic_axes={"x": axes, "out": {}})
    session = ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    values = RNG.standard_normal(other).astype(np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": values})[0], fn(TF, torch.tensor(values)).numpy())
