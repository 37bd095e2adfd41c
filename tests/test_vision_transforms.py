"""Vision transforms: shapes, dtypes, values, and the statistics of the random ones."""
import math

import numpy as np
import pytest

import minidl
from minidl.vision import transforms as T


def _img(h=10, w=12, c=3, dtype=np.uint8):
    return (np.arange(h * w * c).reshape(h, w, c) % 256).astype(dtype)


def _chi2_uniform(counts):
    counts = np.asarray(counts, dtype=np.float64)
    expected = counts.sum() / len(counts)
    return float(((counts - expected) ** 2 / expected).sum())


# chi-square critical values at p = 0.001 for 1..10 degrees of freedom
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32, 8: 26.12, 9: 27.88, 10: 29.59}


def test_to_tensor_uint8():
    img = _img()
    t = T.ToTensor()(img)
    assert isinstance(t, minidl.Tensor)
    assert tuple(t.shape) == (3, 10, 12) and t.dtype == minidl.float32
    np.testing.assert_allclose(t.numpy(), img.transpose(2, 0, 1) / 255.0, atol=1e-7)
    assert t.numpy().min() >= 0 and t.numpy().max() <= 1


def test_to_tensor_grayscale_and_float():
    g = T.ToTensor()(np.full((4, 5), 255, np.uint8))
    assert tuple(g.shape) == (1, 4, 5) and np.all(g.numpy() == 1.0)
    f = np.random.default_rng(0).random((4, 5, 2))
    tf = T.ToTensor()(f)  # floats keep their values and dtype, as in torchvision
    assert tuple(tf.shape) == (2, 4, 5) and tf.dtype == minidl.float64
    np.testing.assert_array_equal(tf.numpy(), f.transpose(2, 0, 1))
    assert tuple(T.ToTensor()(f.astype(np.float32)).shape) == (2, 4, 5)
    with pytest.raises(ValueError):
        T.ToTensor()(np.zeros((2, 2, 2, 2)))


def test_normalize():
    t = T.ToTensor()(_img())
    mean, std = [0.1, 0.2, 0.3], [0.5, 0.25, 2.0]
    out = T.Normalize(mean, std)(t)
    expected = (t.numpy() - np.array(mean, np.float32)[:, None, None]) / np.array(std, np.float32)[:, None, None]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-6)
    before = t.numpy().copy()
    np.testing.assert_array_equal(t.numpy(), before)  # not in place
    same = T.Normalize(mean, std, inplace=True)(t)
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert same is t
    batch = minidl.from_numpy(np.stack([before, before]))
    np.testing.assert_allclose(T.Normalize(mean, std)(batch).numpy()[1], expected, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError):
        T.Normalize([0.0], [0.0])
    with pytest.raises(TypeError):
        T.Normalize([0.0], [1.0])(minidl.zeros(1, 2, 2, dtype=minidl.int64))


def test_compose_and_lambda():
    pipeline = T.Compose([T.ToTensor(), T.Lambda(lambda x: x * 2), T.Normalize([1.0], [1.0])])
    out = pipeline(np.full((3, 3), 255, np.uint8))
    np.testing.assert_allclose(out.numpy(), np.ones((1, 3, 3)))
    assert "Normalize" in repr(pipeline)
    with pytest.raises(TypeError):
        T.Lambda(3)


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 1.0])
def test_horizontal_flip_frequency(p):
    minidl.manual_seed(123)
    img = _img(4, 6, 1)
    flipped_img = img[:, ::-1]
    flip = T.RandomHorizontalFlip(p)
    n = 2000
    flips = 0
    for _ in range(n):
        out = flip(img)
        if np.array_equal(out, flipped_img):
            flips += 1
        else:
            assert np.array_equal(out, img)
    sd = math.sqrt(n * p * (1 - p))
    assert abs(flips - n * p) <= 4 * sd + 1e-9


def test_flips_on_tensors_and_vertical():
    t = minidl.from_numpy(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    np.testing.assert_array_equal(T.RandomHorizontalFlip(1.0)(t).numpy(), t.numpy()[:, :, ::-1])
    np.testing.assert_array_equal(T.RandomVerticalFlip(1.0)(t).numpy(), t.numpy()[:, ::-1, :])
    np.testing.assert_array_equal(T.RandomVerticalFlip(1.0)(_img()), _img()[::-1])


def test_random_transforms_reproducible_with_manual_seed_and_generator():
    img = _img(16, 16, 3)
    aug = T.Compose([T.RandomCrop(12, padding=2), T.RandomHorizontalFlip(), T.RandomResizedCrop(8),
                     T.RandomAffine(20, translate=(0.1, 0.1), scale=(0.9, 1.1))])
    minidl.manual_seed(7)
    a = [aug(img) for _ in range(10)]
    minidl.manual_seed(7)
    b = [aug(img) for _ in range(10)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert any(not np.array_equal(a[0], x) for x in a[1:])
    # an explicit generator: reproducible, and independent of the global RNG
    out = []
    for global_seed in (1, 2):
        minidl.manual_seed(global_seed)
        g = minidl.Generator().manual_seed(99)
        crop = T.RandomCrop(5, generator=g)
        out.append([crop(img) for _ in range(10)])
    assert all(np.array_equal(x, y) for x, y in zip(*out))


def test_random_crop_offsets_uniform():
    h, w, th, tw = 10, 12, 4, 5
    img = np.arange(h * w).reshape(h, w)
    minidl.manual_seed(0)
    crop = T.RandomCrop((th, tw))
    n = 3000
    tops, lefts = np.zeros(h - th + 1, int), np.zeros(w - tw + 1, int)
    for _ in range(n):
        out = crop(img)
        assert out.shape == (th, tw)
        top, left = divmod(int(out[0, 0]), w)
        np.testing.assert_array_equal(out, img[top:top + th, left:left + tw])
        tops[top] += 1
        lefts[left] += 1
    assert tops.min() > 0 and lefts.min() > 0  # every valid offset occurs, no other
    assert _chi2_uniform(tops) < CHI2_999[len(tops) - 1]
    assert _chi2_uniform(lefts) < CHI2_999[len(lefts) - 1]


def test_random_crop_padding_and_pad_if_needed():
    img = np.ones((6, 6), np.uint8)
    minidl.manual_seed(0)
    crop = T.RandomCrop(6, padding=2, fill=0)
    zeros_in_rows = set()
    for _ in range(300):
        out = crop(img)
        assert out.shape == (6, 6)
        zeros_in_rows.add(int((out == 0).all(axis=1).sum()))
    assert zeros_in_rows == {0, 1, 2}  # row shifts -2..2 leave 0, 1 or 2 padded rows
    t = minidl.ones(3, 6, 6)
    assert tuple(T.RandomCrop(8, padding=1)(t).shape) == (3, 8, 8)
    assert tuple(T.RandomCrop((4, 7), padding=(1, 0, 2, 0))(t).shape) == (3, 4, 7)
    padded = T.RandomCrop((9, 10), pad_if_needed=True, fill=5)(np.zeros((4, 3), np.uint8))
    assert padded.shape == (9, 10) and (padded == 5).sum() == 9 * 10 - 4 * 3
    edge = T.RandomCrop(8, padding=1, padding_mode="edge")(img)
    assert np.all(edge == 1)
    with pytest.raises(ValueError):
        T.RandomCrop(7)(img)


def test_center_crop():
    img = np.arange(36).reshape(6, 6)
    np.testing.assert_array_equal(T.CenterCrop(2)(img), img[2:4, 2:4])
    out = T.CenterCrop(8)(img)
    assert out.shape == (8, 8) and out[0].sum() == 0 and out[1, 1] == 0


def test_resize():
    img = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(T.Resize((3, 4))(img), img)  # same size: identity
    up = T.Resize((6, 8), interpolation="nearest")(img)
    np.testing.assert_array_equal(up, img.repeat(2, 0).repeat(2, 1))
    const = np.full((5, 7, 3), 42, np.uint8)
    out = T.Resize((11, 3))(const)
    assert out.shape == (11, 3, 3) and out.dtype == np.uint8 and np.all(out == 42)
    ramp = np.tile(np.arange(8, dtype=np.float64), (2, 1))  # a linear ramp stays linear inside
    down = T.Resize((2, 4), antialias=False)(ramp)
    np.testing.assert_allclose(down[0], [0.5, 2.5, 4.5, 6.5])
    assert T.Resize(4)(np.zeros((8, 16))).shape == (4, 8)  # the smaller edge
    t = minidl.ones(2, 5, 5)
    assert tuple(T.Resize((3, 4))(t).shape) == (2, 3, 4)


def test_random_resized_crop_params_statistics():
    img = np.zeros((100, 120))
    minidl.manual_seed(0)
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    fractions, ratios = [], []
    for _ in range(2000):
        i, j, h, w = T.RandomResizedCrop.get_params(img, scale, ratio)
        assert 0 <= i and 0 <= j and i + h <= 100 and j + w <= 120 and h > 0 and w > 0
        fractions.append(h * w / 12000)
        ratios.append(w / h)
    fractions, ratios = np.array(fractions), np.array(ratios)
    # rounding h and w to ints moves the area by at most about (h + w + 1) / area
    assert fractions.min() >= 0.08 - 0.01 and fractions.max() <= 1.0
    assert fractions.min() < 0.1 and fractions.max() > 0.8  # the whole range is used
    assert ratios.min() >= 0.75 * 0.9 and ratios.max() <= 4 / 3 * 1.1
    assert abs(np.log(ratios).mean()) < 0.05  # log-uniform ratio is symmetric about 1
    narrow = [T.RandomResizedCrop.get_params(img, (0.5, 0.5), (1.0, 1.0)) for _ in range(200)]
    assert all(abs(h * w / 12000 - 0.5) < 0.02 and h == w for _, _, h, w in narrow)


def test_random_resized_crop_fallback_is_center_crop():
    img = np.zeros((10, 100))  # ratio 10: no crop with area >= 0.9 fits, fall back to a centre crop
    i, j, h, w = T.RandomResizedCrop.get_params(img, (0.9, 1.0), (3 / 4, 4 / 3))
    assert (i, j, h, w) == (0, (100 - 13) // 2, 10, 13)


def test_random_resized_crop_output():
    minidl.manual_seed(0)
    img = _img(20, 30, 3)
    for interp in ("bilinear", "nearest"):
        out = T.RandomResizedCrop((7, 9), interpolation=interp)(img)
        assert out.shape == (7, 9, 3) and out.dtype == np.uint8
    t = T.ToTensor()(img)
    out = T.RandomResizedCrop(16)(t)
    assert tuple(out.shape) == (3, 16, 16) and out.dtype == minidl.float32
    full = T.RandomResizedCrop((20, 30), scale=(1.0, 1.0), ratio=(1.5, 1.5))(img)
    np.testing.assert_array_equal(full, img)  # the whole image at its own size
    with pytest.raises(ValueError):
        T.RandomResizedCrop(8, scale=(1.0, 0.5))


def test_affine():
    a = np.arange(16).reshape(4, 4)
    np.testing.assert_array_equal(T.RandomAffine(0)(a), a)
    np.testing.assert_array_equal(T.RandomAffine((90, 90))(a), np.rot90(a))  # counter-clockwise
    shifted = T.affine(a, 0, (1, 0), 1.0, (0, 0))
    np.testing.assert_array_equal(shifted[:, 1:], a[:, :-1])
    assert np.all(shifted[:, 0] == 0)
    assert T.affine(a, 0, (0, 0), 0.5, (0, 0), fill=-1)[0, 0] == -1  # shrunk: the corner reads fill
    t = minidl.from_numpy(np.random.default_rng(0).random((2, 9, 9)).astype(np.float32))
    out = T.RandomAffine(30, translate=(0.2, 0.2), scale=(0.8, 1.2), shear=10, interpolation="bilinear")(t)
    assert tuple(out.shape) == (2, 9, 9) and out.dtype == minidl.float32


def test_affine_params_ranges():
    minidl.manual_seed(0)
    for _ in range(500):
        angle, (tx, ty), s, (shx, shy) = T.RandomAffine.get_params((-10, 20), (0.1, 0.2), (0.5, 2.0), (-5, 5),
                                                                   (30, 40))
        assert -10 <= angle <= 20 and abs(tx) <= 3 and abs(ty) <= 8 and 0.5 <= s <= 2.0
        assert -5 <= shx <= 5 and shy == 0
