"""Image transforms, as in ``torchvision.transforms``, written in numpy.

Images are numpy arrays laid out ``H x W`` or ``H x W x C`` (as a PIL image converts), or
minidl tensors laid out ``... x H x W`` (after :class:`ToTensor`). The geometric transforms
accept both and return the same kind. Random transforms draw from minidl's global RNG, so
``minidl.manual_seed`` makes them reproducible, or from an explicit ``generator=``.
:class:`ImageClassification` is the evaluation preprocessing of torchvision's pretrained weights.
"""
from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Sequence

import numpy as np

import minidl
from minidl.nn import functional as F


__all__ = ["CenterCrop", "Compose", "ImageClassification", "InterpolationMode", "Lambda", "Normalize", "RandomAffine",
           "RandomCrop", "RandomHorizontalFlip", "RandomResizedCrop", "RandomVerticalFlip", "Resize", "ToTensor"]


class InterpolationMode(enum.Enum):
    """torchvision's interpolation modes; BOX, HAMMING and LANCZOS are PIL's only, and refused here."""
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


_PIL_MODES = {0: InterpolationMode.NEAREST, 1: InterpolationMode.LANCZOS, 2: InterpolationMode.BILINEAR,
              3: InterpolationMode.BICUBIC, 4: InterpolationMode.BOX, 5: InterpolationMode.HAMMING}
_SMOOTH = (InterpolationMode.BILINEAR, InterpolationMode.BICUBIC)  # the modes that antialias


def _mode(interpolation) -> InterpolationMode:
    """An ``interpolation=`` argument (the enum, its string value, or a PIL integer constant) as the enum."""
    if isinstance(interpolation, InterpolationMode):
        return interpolation
    if isinstance(interpolation, str):
        try:
            return InterpolationMode(interpolation.lower())
        except ValueError:
            pass
    elif isinstance(interpolation, int) and interpolation in _PIL_MODES:
        return _PIL_MODES[interpolation]
    raise ValueError(f"interpolation must be an InterpolationMode, one of {[m.value for m in InterpolationMode]} "
                     f"or a PIL constant 0..5, got {interpolation!r}")


def _rng(generator):
    return minidl.random.numpy_generator(generator)


def _is_tensor(img) -> bool:
    return isinstance(img, minidl.Tensor)


def _to_array(img):
    """(array, spatial axes (h, w), restore) for a numpy image or a tensor."""
    if _is_tensor(img):
        device = img.device
        arr = img.detach().cpu().numpy() if hasattr(img, "cpu") else img.detach().numpy()
        if arr.ndim < 2:
            raise ValueError(f"expected a tensor of shape (..., H, W), got {tuple(arr.shape)}")

        def restore(out):
            t = minidl.from_numpy(np.ascontiguousarray(out))
            return t if str(device) == "cpu" else t.to(device)
        return arr, (arr.ndim - 2, arr.ndim - 1), restore
    arr = np.asarray(img)
    if arr.ndim not in (2, 3):
        raise ValueError(f"expected a numpy image of shape (H, W) or (H, W, C), got {arr.shape}")
    return arr, (0, 1), lambda out: out


def _size_of(img):
    arr, (ah, aw), _ = _to_array(img)
    return arr.shape[ah], arr.shape[aw]


def _pair(size, name="size"):
    if isinstance(size, numbers.Number):
        return int(size), int(size)
    if isinstance(size, Sequence) and len(size) == 1:
        return int(size[0]), int(size[0])
    if isinstance(size, Sequence) and len(size) == 2:
        return int(size[0]), int(size[1])
    raise ValueError(f"{name} should be an int or a sequence of one or two ints, got {size!r}")


def _crop_array(arr, axes, top, left, height, width):
    index = [slice(None)] * arr.ndim
    index[axes[0]] = slice(top, top + height)
    index[axes[1]] = slice(left, left + width)
    return arr[tuple(index)]


def crop(img, top: int, left: int, height: int, width: int):
    """The ``height x width`` window at (top, left); the window must lie inside the image."""
    arr, axes, restore = _to_array(img)
    h, w = arr.shape[axes[0]], arr.shape[axes[1]]
    if top < 0 or left < 0 or top + height > h or left + width > w:
        raise ValueError(f"crop window ({top}, {left}, {height}, {width}) is outside the {h}x{w} image")
    return restore(_crop_array(arr, axes, top, left, height, width).copy())


def pad(img, padding, fill=0, padding_mode: str = "constant"):
    """Pad the border: ``padding`` an int, (left/right, top/bottom) or (left, top, right, bottom)."""
    if isinstance(padding, numbers.Number):
        left = top = right = bottom = int(padding)
    elif len(padding) == 1:
        left = top = right = bottom = int(padding[0])
    elif len(padding) == 2:
        left = right = int(padding[0])
        top = bottom = int(padding[1])
    elif len(padding) == 4:
        left, top, right, bottom = (int(p) for p in padding)
    else:
        raise ValueError(f"padding must be an int or a sequence of 1, 2 or 4 ints, got {padding!r}")
    if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
        raise ValueError(f"padding_mode must be constant, edge, reflect or symmetric, got {padding_mode!r}")
    arr, axes, restore = _to_array(img)
    widths = [(0, 0)] * arr.ndim
    widths[axes[0]] = (top, bottom)
    widths[axes[1]] = (left, right)
    if padding_mode == "constant":
        out = np.pad(arr, widths, mode="constant", constant_values=fill)
    else:
        out = np.pad(arr, widths, mode=padding_mode)
    return restore(out)


def _sample(arr, axes, ys, xs, interpolation):
    """Sample ``arr`` at the (fractional, pixel-centre) source coordinates ys (Ho x Wo) and xs.

    Coordinates outside the image read ``fill`` handled by the caller via the returned mask.
    """
    h, w = arr.shape[axes[0]], arr.shape[axes[1]]
    moved = np.moveaxis(arr, axes, (0, 1))  # H x W x rest
    src = moved.astype(np.float64)
    if interpolation is InterpolationMode.NEAREST:
        yi = np.clip(np.floor(ys + 0.5).astype(np.int64), 0, h - 1)
        xi = np.clip(np.floor(xs + 0.5).astype(np.int64), 0, w - 1)
        out = src[yi, xi]
    elif interpolation is InterpolationMode.BILINEAR:
        y0 = np.floor(ys)
        x0 = np.floor(xs)
        wy = (ys - y0).reshape(ys.shape + (1,) * (src.ndim - 2))
        wx = (xs - x0).reshape(xs.shape + (1,) * (src.ndim - 2))
        y0i = np.clip(y0.astype(np.int64), 0, h - 1)
        x0i = np.clip(x0.astype(np.int64), 0, w - 1)
        y1i = np.clip(y0.astype(np.int64) + 1, 0, h - 1)
        x1i = np.clip(x0.astype(np.int64) + 1, 0, w - 1)
        out = ((1 - wy) * ((1 - wx) * src[y0i, x0i] + wx * src[y0i, x1i])
               + wy * ((1 - wx) * src[y1i, x0i] + wx * src[y1i, x1i]))
    else:
        raise ValueError(f"affine implements nearest and bilinear interpolation, not {interpolation.value}")
    if np.issubdtype(arr.dtype, np.integer):
        info = np.iinfo(arr.dtype)
        out = np.clip(np.round(out), info.min, info.max)
    return np.moveaxis(out.astype(arr.dtype), (0, 1), axes)


def _resized_size(h: int, w: int, size, max_size=None):
    """torchvision's output size: (h, w) given, or the smaller edge ``s`` and the longer ``int(s * long / short)``,
    both scaled down when the longer would exceed ``max_size``."""
    if isinstance(size, numbers.Number):
        size = [size]
    if not isinstance(size, Sequence) or len(size) not in (1, 2):
        raise ValueError(f"size must be an int or a sequence of one or two ints, got {size!r}")
    if len(size) == 2:
        if max_size is not None:
            raise ValueError("max_size should only be passed if size specifies the length of the smaller edge")
        return int(size[0]), int(size[1])
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = int(size[0]), int(int(size[0]) * long / short)
    if max_size is not None:
        if max_size <= new_short:
            raise ValueError(f"max_size = {max_size} must be strictly greater than the requested size for the "
                             f"smaller edge size = {list(size)}")
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if w <= h else (new_short, new_long)


def resize(img, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias: bool = True):
    """Resize to ``size`` by torchvision's rules (see ``_resized_size``); the image itself when the size is unchanged.

    As torchvision's tensor path: torch's ``interpolate`` (``align_corners=False``) in float32 (float64 stays),
    antialiased for bilinear and bicubic when ``antialias`` (PIL's filters, widened by the downscale factor); integer
    images are then clamped and rounded half to even.
    """
    mode = _mode(interpolation)
    if mode not in _SMOOTH + (InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT):
        raise ValueError(f"resize implements nearest, nearest-exact, bilinear and bicubic, not {mode.value} "
                         f"(as torchvision's tensor resize)")
    arr, axes, restore = _to_array(img)
    h, w = arr.shape[axes[0]], arr.shape[axes[1]]
    oh, ow = _resized_size(h, w, size, max_size)
    if (oh, ow) == (h, w):
        return img
    moved = np.moveaxis(arr, axes, (-2, -1))
    work = arr.dtype if arr.dtype in (np.float32, np.float64) else np.float32
    x = minidl.from_numpy(np.ascontiguousarray(moved.reshape(1, -1, h, w), dtype=work))
    smooth = mode in _SMOOTH
    out = F.interpolate(x, size=(oh, ow), mode=mode.value, align_corners=False if smooth else None,
                        antialias=bool(antialias) and smooth).numpy().reshape(moved.shape[:-2] + (oh, ow))
    if np.issubdtype(arr.dtype, np.integer):
        info = np.iinfo(arr.dtype)
        out = np.round(np.clip(out, info.min, info.max))
    return restore(np.moveaxis(out.astype(arr.dtype), (-2, -1), axes))


def center_crop(img, output_size):
    """The centred ``output_size`` window (torchvision's offsets), zero-padding an image smaller than it."""
    h, w = _size_of(img)
    th, tw = _pair(output_size, "output_size")
    if th > h or tw > w:
        img = pad(img, [max(tw - w, 0) // 2, max(th - h, 0) // 2,
                        (max(tw - w, 0) + 1) // 2, (max(th - h, 0) + 1) // 2])
        h, w = _size_of(img)
    return crop(img, int(round((h - th) / 2.0)), int(round((w - tw) / 2.0)), th, tw)


def hflip(img):
    arr, axes, restore = _to_array(img)
    return restore(np.flip(arr, axis=axes[1]).copy())


def vflip(img):
    arr, axes, restore = _to_array(img)
    return restore(np.flip(arr, axis=axes[0]).copy())


class Compose:
    """Apply the transforms one after another."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img

    def __repr__(self):
        body = "".join(f"\n    {t}" for t in self.transforms)
        return f"{type(self).__name__}({body}\n)"


class ToTensor:
    """A numpy image ``H x W x C`` (or ``H x W``) to a ``C x H x W`` tensor.

    uint8 images are scaled to float32 in [0, 1]; other dtypes keep their values and dtype, as in
    torchvision. A tensor passes through unchanged.
    """

    def __call__(self, pic):
        if _is_tensor(pic):
            return pic
        arr = np.asarray(pic)
        if arr.ndim == 2:
            arr = arr[:, :, None]
        if arr.ndim != 3:
            raise ValueError(f"pic should be 2 or 3 dimensional, got {arr.ndim} dimensions")
        out = np.ascontiguousarray(arr.transpose(2, 0, 1))
        if out.dtype == np.uint8:
            out = out.astype(np.float32) / np.float32(255)
        elif out.dtype == np.bool_:
            out = out.astype(np.float32)
        return minidl.from_numpy(out)

    def __repr__(self):
        return f"{type(self).__name__}()"


class Normalize:
    """``(x - mean) / std`` per channel of a ``(..., C, H, W)`` tensor (or an ``H x W x C`` array)."""

    def __init__(self, mean, std, inplace: bool = False):
        self.mean = list(mean) if isinstance(mean, Sequence) else [mean]
        self.std = list(std) if isinstance(std, Sequence) else [std]
        if any(s == 0 for s in self.std):
            raise ValueError(f"std evaluated to zero after conversion, leading to division by zero: {self.std}")
        self.inplace = inplace

    def __call__(self, tensor):
        if not _is_tensor(tensor):
            arr = np.asarray(tensor)
            if not np.issubdtype(arr.dtype, np.floating):
                raise TypeError(f"Normalize expects a floating-point image, got {arr.dtype}")
            out = arr if self.inplace else arr.copy()
            out -= np.asarray(self.mean, dtype=arr.dtype)
            out /= np.asarray(self.std, dtype=arr.dtype)
            return out
        if not tensor.is_floating_point():
            raise TypeError(f"Input tensor should be a float tensor. Got {tensor.dtype}.")
        if tensor.dim() < 3:
            raise ValueError(f"Expected tensor to be a tensor image of size (..., C, H, W). Got {tuple(tensor.shape)}.")
        mean = minidl.tensor(self.mean, dtype=tensor.dtype, device=tensor.device).reshape(-1, 1, 1)
        std = minidl.tensor(self.std, dtype=tensor.dtype, device=tensor.device).reshape(-1, 1, 1)
        if self.inplace:
            return tensor.sub_(mean).div_(std)
        return (tensor - mean) / std

    def __repr__(self):
        return f"{type(self).__name__}(mean={self.mean}, std={self.std})"


class Lambda:
    """A user function as a transform."""

    def __init__(self, lambd):
        if not callable(lambd):
            raise TypeError(f"Argument lambd should be callable, got {type(lambd).__name__!r}")
        self.lambd = lambd

    def __call__(self, img):
        return self.lambd(img)

    def __repr__(self):
        return f"{type(self).__name__}()"


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5, generator=None):
        self.p = p
        self.generator = generator

    def __call__(self, img):
        return hflip(img) if _rng(self.generator).random() < self.p else img

    def __repr__(self):
        return f"{type(self).__name__}(p={self.p})"


class RandomVerticalFlip(RandomHorizontalFlip):
    def __call__(self, img):
        return vflip(img) if _rng(self.generator).random() < self.p else img


class CenterCrop:
    def __init__(self, size):
        self.size = _pair(size)

    def __call__(self, img):
        return center_crop(img, self.size)

    def __repr__(self):
        return f"{type(self).__name__}(size={self.size})"


class Resize:
    """:func:`resize` as a transform."""

    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias: bool = True):
        if not isinstance(size, (int, Sequence)) or (isinstance(size, Sequence) and len(size) not in (1, 2)):
            raise ValueError(f"size must be an int or a sequence of one or two ints, got {size!r}")
        self.size = size
        self.max_size = max_size
        self.interpolation = _mode(interpolation)
        self.antialias = antialias

    def __call__(self, img):
        return resize(img, self.size, self.interpolation, self.max_size, self.antialias)

    def __repr__(self):
        return (f"{type(self).__name__}(size={self.size}, interpolation={self.interpolation.value}, "
                f"max_size={self.max_size}, antialias={self.antialias})")


class RandomCrop:
    """Crop a random ``size`` window, offsets uniform over the valid range (after optional padding)."""

    def __init__(self, size, padding=None, pad_if_needed: bool = False, fill=0, padding_mode: str = "constant",
                 generator=None):
        self.size = _pair(size)
        self.padding = padding
        self.pad_if_needed = pad_if_needed
        self.fill = fill
        self.padding_mode = padding_mode
        self.generator = generator

    @staticmethod
    def get_params(img, output_size, generator=None):
        """(top, left, height, width) of a random crop."""
        h, w = _size_of(img)
        th, tw = output_size
        if h < th or w < tw:
            raise ValueError(f"Required crop size {(th, tw)} is larger than input image size {(h, w)}")
        if w == tw and h == th:
            return 0, 0, h, w
        g = _rng(generator)
        i = int(g.integers(0, h - th + 1))
        j = int(g.integers(0, w - tw + 1))
        return i, j, th, tw

    def __call__(self, img):
        if self.padding is not None:
            img = pad(img, self.padding, self.fill, self.padding_mode)
        h, w = _size_of(img)
        th, tw = self.size
        if self.pad_if_needed and w < tw:
            img = pad(img, [tw - w, 0], self.fill, self.padding_mode)
        if self.pad_if_needed and h < th:
            img = pad(img, [0, th - h], self.fill, self.padding_mode)
        return crop(img, *self.get_params(img, self.size, self.generator))

    def __repr__(self):
        return f"{type(self).__name__}(size={self.size}, padding={self.padding})"


class RandomResizedCrop:
    """Crop a random area fraction in ``scale`` with aspect ratio in ``ratio``, resized to ``size``."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=InterpolationMode.BILINEAR, antialias: bool = True, generator=None):
        self.size = _pair(size)
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError("scale and ratio should be of kind (min, max)")
        self.scale = scale
        self.ratio = ratio
        self.interpolation = _mode(interpolation)
        self.antialias = antialias
        self.generator = generator

    @staticmethod
    def get_params(img, scale, ratio, generator=None):
        """(top, left, height, width) of a random crop, by torchvision's rule (10 tries, then a centre crop)."""
        height, width = _size_of(img)
        area = height * width
        g = _rng(generator)
        log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
        for _ in range(10):
            target_area = area * float(g.uniform(scale[0], scale[1]))
            aspect_ratio = math.exp(float(g.uniform(log_ratio[0], log_ratio[1])))
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                i = int(g.integers(0, height - h + 1))
                j = int(g.integers(0, width - w + 1))
                return i, j, h, w
        in_ratio = float(width) / float(height)  # fallback: a centre crop
        if in_ratio < min(ratio):
            w = width
            h = int(round(w / min(ratio)))
        elif in_ratio > max(ratio):
            h = height
            w = int(round(h * max(ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img):
        i, j, h, w = self.get_params(img, self.scale, self.ratio, self.generator)
        return resize(crop(img, i, j, h, w), self.size, self.interpolation, antialias=self.antialias)

    def __repr__(self):
        return (f"{type(self).__name__}(size={self.size}, scale={tuple(round(s, 4) for s in self.scale)}, "
                f"ratio={tuple(round(r, 4) for r in self.ratio)}, interpolation={self.interpolation.value}, "
                f"antialias={self.antialias})")


class RandomAffine:
    """A random rotation (degrees), translation (fractions of the size), scale and shear about the centre.

    Each output pixel reads the input at the inverse-mapped point; points outside read ``fill``.
    """

    def __init__(self, degrees, translate=None, scale=None, shear=None, interpolation=InterpolationMode.NEAREST,
                 fill=0, generator=None):
        self.degrees = (-float(degrees), float(degrees)) if isinstance(degrees, numbers.Number) else tuple(degrees)
        self.translate = translate
        self.scale = scale
        if shear is not None and isinstance(shear, numbers.Number):
            shear = (-float(shear), float(shear))
        self.shear = shear
        self.interpolation = _mode(interpolation)
        self.fill = fill
        self.generator = generator

    @staticmethod
    def get_params(degrees, translate, scale_ranges, shears, img_size, generator=None):
        """(angle, (tx, ty), scale, (shear_x, shear_y)); img_size is (width, height) as torchvision."""
        g = _rng(generator)
        angle = float(g.uniform(degrees[0], degrees[1]))
        if translate is not None:
            max_dx = float(translate[0] * img_size[0])
            max_dy = float(translate[1] * img_size[1])
            tx = int(round(float(g.uniform(-max_dx, max_dx))))
            ty = int(round(float(g.uniform(-max_dy, max_dy))))
        else:
            tx = ty = 0
        scale = float(g.uniform(scale_ranges[0], scale_ranges[1])) if scale_ranges is not None else 1.0
        shear_x = shear_y = 0.0
        if shears is not None:
            shear_x = float(g.uniform(shears[0], shears[1]))
            if len(shears) == 4:
                shear_y = float(g.uniform(shears[2], shears[3]))
        return angle, (tx, ty), scale, (shear_x, shear_y)

    def __call__(self, img):
        h, w = _size_of(img)
        angle, (tx, ty), scale, (shx, shy) = self.get_params(self.degrees, self.translate, self.scale, self.shear,
                                                             (w, h), self.generator)
        return affine(img, angle, (tx, ty), scale, (shx, shy), self.interpolation, self.fill)

    def __repr__(self):
        return (f"{type(self).__name__}(degrees={self.degrees}, translate={self.translate}, scale={self.scale}, "
                f"shear={self.shear})")


def affine(img, angle, translate, scale, shear, interpolation=InterpolationMode.NEAREST, fill=0):
    """Rotate by ``angle`` degrees (counter-clockwise on screen), scale, shear and translate about the centre."""
    arr, axes, restore = _to_array(img)
    h, w = arr.shape[axes[0]], arr.shape[axes[1]]
    a = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    # forward map on (x, y) about the centre: T * R * Shear * S, with y pointing down
    rot = np.array([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])
    shr = np.array([[1.0, math.tan(sx)], [math.tan(sy), 1.0]])
    m = rot @ shr * scale
    inv = np.linalg.inv(m)
    cx, cy = (w - 1) / 2.0, (h - 1) / 2.0
    yy, xx = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64), indexing="ij")
    dx, dy = xx - cx - translate[0], yy - cy - translate[1]
    src_x = inv[0, 0] * dx + inv[0, 1] * dy + cx
    src_y = inv[1, 0] * dx + inv[1, 1] * dy + cy
    inside = (src_x > -0.5) & (src_x < w - 0.5) & (src_y > -0.5) & (src_y < h - 0.5)
    out = _sample(arr, axes, np.clip(src_y, 0, h - 1), np.clip(src_x, 0, w - 1), _mode(interpolation))
    moved = np.moveaxis(out, axes, (0, 1)).copy()
    moved[~inside] = fill
    return restore(np.moveaxis(moved, (0, 1), axes))


def _to_float_image(img):
    """A numpy (or PIL) ``H x W x C`` image or a tensor as a ``(..., C, H, W)`` float32 tensor, integers scaled to
    [0, 1] by their dtype's maximum (torchvision's ``convert_image_dtype``)."""
    t = ToTensor()(img)
    if t.is_floating_point():
        return t.to(minidl.float32)
    return t.to(minidl.float32) / float(minidl.iinfo(t.dtype).max)


class ImageClassification:
    """torchvision's evaluation preset of its ImageNet weights (``weights.transforms()``): resize the smaller edge to
    ``resize_size``, centre-crop ``crop_size``, scale to [0, 1] in float32 and normalise. Takes a numpy
    ``H x W x C`` image, a PIL image or a ``(..., C, H, W)`` tensor; returns a ``(..., C, H, W)`` tensor."""

    def __init__(self, *, crop_size: int, resize_size: int = 256, mean=(0.485, 0.456, 0.406),
                 std=(0.229, 0.224, 0.225), interpolation=InterpolationMode.BILINEAR, antialias: bool = True):
        self.crop_size = [crop_size]
        self.resize_size = [resize_size]
        self.mean = list(mean)
        self.std = list(std)
        self.interpolation = _mode(interpolation)
        self.antialias = antialias

    def __call__(self, img):
        img = resize(img, self.resize_size, self.interpolation, antialias=self.antialias)
        img = center_crop(img, self.crop_size)
        return Normalize(self.mean, self.std)(_to_float_image(img))

    def __repr__(self):
        return (f"{type(self).__name__}(\n    crop_size={self.crop_size}\n    resize_size={self.resize_size}"
                f"\n    mean={self.mean}\n    std={self.std}\n    interpolation={self.interpolation}\n)")

    def describe(self) -> str:
        return ("Accepts ``PIL.Image``, batched ``(B, C, H, W)`` and single ``(C, H, W)`` image ``torch.Tensor`` "
                f"objects. The images are resized to ``resize_size={self.resize_size}`` using "
                f"``interpolation={self.interpolation}``, followed by a central crop of "
                f"``crop_size={self.crop_size}``. Finally the values are first rescaled to ``[0.0, 1.0]`` and then "
                f"normalized using ``mean={self.mean}`` and ``std={self.std}``.")
