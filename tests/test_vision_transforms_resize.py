"""vision.transforms' resize and the ImageClassification preset against torch's interpolate (which torchvision's
tensor path calls) and PIL; the size rules, reprs and preset attributes as literals from torchvision 0.29.1."""
from __future__ import annotations

import time

import numpy as np
import pytest

import minidl
from minidl.vision import transforms as T
from minidl.vision.transforms import InterpolationMode

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")
TF = torch.nn.functional

TOL = {np.float32: 1e-5, np.float64: 1e-10}
SIZES = [((37, 53), (11, 20)),    # down, non-square, odd
         ((9, 7), (23, 31)),      # up
         ((40, 30), (1, 1)),      # one pixel
         ((13, 17), (5, 41)),     # down one axis, up the other
         ((64, 48), (17, 13)),
         ((5, 8), (5, 3))]        # one axis unchanged


def _noise(h=375, w=500, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _photo_like(h=375, w=500):
    """Noise smoothed by PIL (down then up): edges without the single-pixel spikes of white noise."""
    return np.asarray(Image.fromarray(_noise(h, w)).resize((w // 4, h // 4), Image.BILINEAR)
                      .resize((w, h), Image.BICUBIC))


def _torch_resize_uint8(img, size, mode):
    """torchvision 0.29.1's tensor resize of a uint8 image: interpolate in float32, clamp, round, cast."""
    x = torch.from_numpy(img.transpose(2, 0, 1).copy())[None].float()
    out = TF.interpolate(x, size, mode=mode, antialias=True, align_corners=False)[0]
    return out.clamp(0, 255).round().to(torch.uint8).numpy().transpose(1, 2, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("sizes", SIZES, ids=str)
def test_resize_float_matches_torch_interpolate(dtype, mode, antialias, sizes):
    (h, w), (oh, ow) = sizes
    x = np.random.default_rng(h * w).random((3, h, w)).astype(dtype)
    ref = TF.interpolate(torch.from_numpy(x)[None], (oh, ow), mode=mode, antialias=antialias,
                         align_corners=False)[0].numpy()
    ours = T.resize(minidl.from_numpy(x), (oh, ow), mode, antialias=antialias)
    assert isinstance(ours, minidl.Tensor) and ours.dtype == minidl.from_numpy(x).dtype
    np.testing.assert_allclose(ours.numpy(), ref, rtol=0, atol=TOL[dtype])
    hwc = T.resize(x.transpose(1, 2, 0), (oh, ow), InterpolationMode(mode), antialias=antialias)  # numpy H x W x C
    assert hwc.dtype == dtype
    np.testing.assert_allclose(hwc.transpose(2, 0, 1), ref, rtol=0, atol=TOL[dtype])


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_resize_float32_at_photo_size(mode):
    """At a few hundred pixels torch's float32 antialiased kernels drift from the float64 result (they place the
    filter in float32: up to ~3e-5 at 300 pixels); ours builds the weights in float64 and stays within 1e-6."""
    x = np.random.default_rng(1).random((1, 3, 300, 240))
    for size in [(290, 232), (100, 232), (375, 500)]:
        ref = TF.interpolate(torch.from_numpy(x), size, mode=mode, antialias=True, align_corners=False).numpy()
        ours = T.resize(minidl.from_numpy(x.astype(np.float32)), size, mode).numpy()
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6)


def test_antialias_on_upscaling_is_the_pil_filter_unwidened():
    """torchvision passes antialias=True when upscaling too: bilinear is then plain bilinear, but bicubic takes
    PIL's a = -0.5 filter (renormalised at the border) instead of interpolate's a = -0.75."""
    x = np.random.default_rng(0).random((1, 5, 6))
    up = {aa: T.resize(x.transpose(1, 2, 0), (9, 11), "bicubic", antialias=aa) for aa in (True, False)}
    assert np.abs(up[True] - up[False]).max() > 1e-2
    np.testing.assert_allclose(T.resize(x[0], (9, 11), antialias=True), T.resize(x[0], (9, 11), antialias=False),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_resize_nearest_matches_torch(mode):
    x = np.random.default_rng(0).random((2, 13, 9)).astype(np.float32)
    for size in [(5, 4), (29, 20), (1, 9)]:
        ref = TF.interpolate(torch.from_numpy(x)[None], size, mode=mode)[0].numpy()
        np.testing.assert_array_equal(T.resize(minidl.from_numpy(x), size, mode).numpy(), ref)


@pytest.mark.parametrize("image", [_noise, _photo_like], ids=["noise", "photo_like"])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_resize_uint8_matches_torchvision_tensor_path(image, mode):
    """Rounding half to even after float32 sums: a tie that lands an ulp apart rounds the other way, so a few
    values (under 0.1%) differ by one grey level."""
    img = image()
    for size in [(256, 341), (600, 800), (37, 501), (1, 1)]:
        ours = T.resize(img, size, mode)
        assert ours.dtype == np.uint8 and ours.shape == size + (3,)
        diff = np.abs(ours.astype(int) - _torch_resize_uint8(img, size, mode))
        assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, (size, diff.max(), (diff > 0).mean())


@pytest.mark.parametrize("mode,pil", [("bilinear", "BILINEAR"), ("bicubic", "BICUBIC")])
def test_resize_uint8_within_one_grey_level_of_pil(mode, pil):
    """PIL computes the same filters in fixed point and rounds after each axis: within one grey level. On white
    noise bicubic parts further (up to ~20 levels at ~0.5% of pixels): PIL clips the horizontal pass's overshoot
    to [0, 255] before the vertical pass, torch (and torchvision's tensor path) clamps only at the end."""
    for img in (_photo_like(), _noise()) if mode == "bilinear" else (_photo_like(),):
        for size in [(256, 341), (100, 77), (600, 800), (1, 1), (375, 700)]:
            ref = np.asarray(Image.fromarray(img).resize(size[::-1], getattr(Image, pil)))
            diff = np.abs(T.resize(img, size, mode).astype(int) - ref)
            assert diff.max() <= 1, (size, diff.max())


# (image h, w), size, max_size -> output (h, w): torchvision 0.29.1's F.resize on tensors of those sizes
SIZE_RULE = [((375, 500), 256, None, (256, 341)), ((500, 375), 256, None, (341, 256)),
             ((100, 100), 32, None, (32, 32)), ((7, 13), 5, None, (5, 9)), ((480, 640), [224], None, (224, 298)),
             ((299, 301), 256, None, (256, 257)), ((3, 7), 2, None, (2, 4)), ((10, 1000), 20, 500, (5, 500)),
             ((1000, 10), 20, 500, (500, 5)), ((333, 500), 256, 300, (200, 300))]


@pytest.mark.parametrize("hw,size,max_size,expected", SIZE_RULE, ids=str)
def test_smaller_edge_size_rule_and_max_size(hw, size, max_size, expected):
    out = T.Resize(size, max_size=max_size)(np.zeros(hw + (3,), np.uint8))
    assert out.shape == expected + (3,)
    assert tuple(T.resize(minidl.zeros(2, *hw), size, max_size=max_size).shape) == (2,) + expected


def test_resize_errors_and_identity():
    img = np.zeros((20, 30), np.float32)
    with pytest.raises(ValueError, match="max_size should only be passed"):
        T.resize(img, [3, 4], max_size=10)
    with pytest.raises(ValueError, match="must be strictly greater"):
        T.resize(img, 10, max_size=10)
    with pytest.raises(ValueError, match="one or two"):
        T.Resize([1, 2, 3])
    assert T.resize(img, 20) is img  # the size is unchanged: the image itself, as torchvision


def test_interpolation_mode():
    assert [(m.name, m.value) for m in InterpolationMode] == [
        ("NEAREST", "nearest"), ("NEAREST_EXACT", "nearest-exact"), ("BILINEAR", "bilinear"), ("BICUBIC", "bicubic"),
        ("BOX", "box"), ("HAMMING", "hamming"), ("LANCZOS", "lanczos")]
    assert T.Resize(8, interpolation="bicubic").interpolation is InterpolationMode.BICUBIC
    assert T.Resize(8, interpolation=Image.BICUBIC).interpolation is InterpolationMode.BICUBIC  # PIL's constants
    assert T.RandomAffine(0, interpolation="bilinear").interpolation is InterpolationMode.BILINEAR
    img = np.random.default_rng(0).random((6, 8))
    np.testing.assert_array_equal(T.resize(img, 3, "bicubic"), T.resize(img, 3, InterpolationMode.BICUBIC))
    for mode in ("box", "hamming", InterpolationMode.LANCZOS):
        with pytest.raises(ValueError, match=f"not {InterpolationMode(mode).value}"):
            T.resize(img, 3, mode)
    with pytest.raises(ValueError, match="interpolation must be"):
        T.Resize(8, interpolation="trilinear")
    with pytest.raises(ValueError, match="affine implements nearest and bilinear"):
        T.affine(img, 10, (0, 0), 1.0, (0, 0), "bicubic")


def test_reprs_as_torchvision():
    assert repr(T.Resize(256)) == "Resize(size=256, interpolation=bilinear, max_size=None, antialias=True)"
    assert (repr(T.Resize([224], InterpolationMode.BICUBIC, max_size=300, antialias=False))
            == "Resize(size=[224], interpolation=bicubic, max_size=300, antialias=False)")
    assert (repr(T.RandomResizedCrop(8, interpolation="nearest"))
            == "RandomResizedCrop(size=(8, 8), scale=(0.08, 1.0), ratio=(0.75, 1.3333), interpolation=nearest, "
               "antialias=True)")


def _torch_preset(img_chw, crop, resize, mode, mean, std):
    """ImageClassification recomposed in torch: smaller edge to ``resize``, centre crop, [0, 1], normalise."""
    x = torch.from_numpy(img_chw)[None]
    h, w = x.shape[-2:]
    size = (resize, int(resize * w / h)) if h <= w else (int(resize * h / w), resize)
    x = TF.interpolate(x if x.is_floating_point() else x.float(), size, mode=mode, antialias=True,
                       align_corners=False)
    if img_chw.dtype == np.uint8:
        x = x.clamp(0, 255).round() / 255
    top, left = int(round((size[0] - crop) / 2.0)), int(round((size[1] - crop) / 2.0))
    x = x[0, :, top:top + crop, left:left + crop]
    return ((x - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]).numpy()


@pytest.mark.parametrize("crop,resize,mode", [(224, 256, "bilinear"), (224, 232, "bicubic")])
def test_image_classification_matches_a_torch_recomposition(crop, resize, mode):
    preset = T.ImageClassification(crop_size=crop, resize_size=resize, interpolation=mode)
    mean, std = preset.mean, preset.std
    img = _photo_like()
    ref = _torch_preset(img.transpose(2, 0, 1).copy(), crop, resize, mode, mean, std)
    one_level = 1 / 255 / min(std) + 1e-5  # the uint8 resize's rare ties (see above), normalised
    for given in (img, Image.fromarray(img), minidl.from_numpy(img.transpose(2, 0, 1).copy())):
        out = preset(given)
        assert isinstance(out, minidl.Tensor) and out.dtype == minidl.float32 and tuple(out.shape) == (3, crop, crop)
        diff = np.abs(out.numpy() - ref)
        assert diff.max() <= one_level and (diff > 1e-5).mean() < 1e-3
    floats = np.random.default_rng(1).random((2, 3, 300, 240))  # a batch, no rounding; float64 reference as
    out = preset(minidl.from_numpy(floats.astype(np.float32)))  # in test_resize_float32_at_photo_size
    for b in range(2):
        np.testing.assert_allclose(out.numpy()[b], _torch_preset(floats[b], crop, resize, mode, mean, std),
                                   rtol=0, atol=1e-5)


def test_image_classification_attributes_repr_describe_as_torchvision():
    p = T.ImageClassification(crop_size=384, resize_size=384, interpolation="bicubic")
    # the literals below are torchvision 0.29.1's for ImageClassification(crop_size=384, resize_size=384,
    # interpolation=InterpolationMode.BICUBIC)
    assert (p.crop_size, p.resize_size) == ([384], [384])
    assert (p.mean, p.std) == ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    assert p.interpolation is InterpolationMode.BICUBIC and p.interpolation.value == "bicubic" and p.antialias is True
    assert repr(p) == ("ImageClassification(\n    crop_size=[384]\n    resize_size=[384]\n    mean=[0.485, 0.456, "
                       "0.406]\n    std=[0.229, 0.224, 0.225]\n    interpolation=InterpolationMode.BICUBIC\n)")
    assert p.describe() == (
        "Accepts ``PIL.Image``, batched ``(B, C, H, W)`` and single ``(C, H, W)`` image ``torch.Tensor`` objects. "
        "The images are resized to ``resize_size=[384]`` using ``interpolation=InterpolationMode.BICUBIC``, "
        "followed by a central crop of ``crop_size=[384]``. Finally the values are first rescaled to ``[0.0, 1.0]`` "
        "and then normalized using ``mean=[0.485, 0.456, 0.406]`` and ``std=[0.229, 0.224, 0.225]``.")
    d = T.ImageClassification(crop_size=224)
    assert (d.crop_size, d.resize_size, d.interpolation, d.antialias) == ([224], [256], InterpolationMode.BILINEAR,
                                                                          True)
    with pytest.raises(TypeError):
        T.ImageClassification(224)  # keyword-only, as torchvision


def test_preset_is_fast_on_a_photo_sized_image():
    img, preset = _noise(), T.ImageClassification(crop_size=224, interpolation="bicubic")
    preset(img)  # (first use may compile kernels)
    best = min(_timed(preset, img) for _ in range(3))
    assert best < 0.5, best


def _timed(fn, arg):
    start = time.perf_counter()
    fn(arg)
    return time.perf_counter() - start
