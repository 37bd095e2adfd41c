"""How a model builder takes ``weights=``, as torchvision's builders do, without downloading anything.

Each builder has a weights enum (``ResNet50_Weights``) whose members name torchvision's published weight sets: where
they are published (``url``), what they were trained to see (``transforms()``: the preprocessing, as
:class:`minidl.vision.transforms.ImageClassification`) and facts about them (``meta``). minidl reaches no network:
``weights=`` is a path to a file the user has (a torchvision ``.pth``, read safely by :func:`minidl.load`, or a
``.safetensors``); naming a weight set instead raises an error that says where to fetch it.
"""
from __future__ import annotations

import enum
import functools
import os
from dataclasses import dataclass, field

import minidl

__all__ = ["Weights", "WeightsEnum", "get_model", "get_model_builder", "get_model_weights", "list_models"]

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_BUILDERS: dict = {}


@dataclass(frozen=True)
class Weights:
    """A published weight set: its address, its preprocessing (a factory), and facts (``num_params``...)."""
    url: str
    transforms: object
    meta: dict = field(default_factory=dict)


def imagenet_preset(crop_size: int = 224, resize_size: int = 256, interpolation: str = "bilinear"):
    """The ImageNet evaluation preprocessing of a weight set, as a factory (``Weights.transforms``)."""
    from minidl.vision.transforms import ImageClassification
    return functools.partial(ImageClassification, crop_size=crop_size, resize_size=resize_size, mean=IMAGENET_MEAN,
                             std=IMAGENET_STD, interpolation=interpolation)


class Default:
    """A weights enum's ``DEFAULT`` (``ResNet50_Weights.DEFAULT``, ``weights="DEFAULT"``, as in torchvision): the
    recommended member, as a descriptor, so that it is no member itself and the enum lists each weight set once."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, instance, owner):
        return owner[self.name]


class WeightsEnum(enum.Enum):
    """The weight sets of one architecture; ``verify`` turns a member's name (or ``"DEFAULT"``) into the member."""

    @classmethod
    def verify(cls, obj):
        if obj is None or isinstance(obj, cls):
            return obj
        member = cls.named(obj) if isinstance(obj, str) else None
        if member is not None:
            return member
        raise TypeError(f"weights must be a {cls.__name__}, one of its names or a file path; got {obj!r}")

    @classmethod
    def named(cls, name: str):
        """The member ``name`` (``"IMAGENET1K_V1"``, ``"ResNet50_Weights.IMAGENET1K_V1"`` or ``"DEFAULT"``), or None."""
        member = getattr(cls, name.replace(cls.__name__ + ".", ""), None)
        return member if isinstance(member, cls) else None

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_value_"), name)

    def __repr__(self):
        return f"{type(self).__name__}.{self._name_}"


def load_weights(model, weights, weights_enum: type):
    """``model`` with ``weights`` loaded when it is a file path (strictly: every name and shape must match; nothing
    in the file changes the architecture, so pass what it needs, such as ``image_size=384`` for ViT's SWAG E2E set).
    A weight set of ``weights_enum``, or its name (a name is read as the weight set even where a file has it), is
    refused with where to fetch it; another architecture's weight set, as in torchvision, with a TypeError."""
    if weights is None:
        return model
    if isinstance(weights, WeightsEnum) or (isinstance(weights, str) and weights_enum.named(weights) is not None):
        published = weights_enum.verify(weights) if isinstance(weights, str) else weights
        if not isinstance(published, weights_enum):
            raise TypeError(f"Invalid Weight class provided; expected {weights_enum.__name__} but received "
                            f"{type(weights).__name__}.")
        raise RuntimeError(f"minidl downloads nothing: fetch {published!r} from {published.url} yourself, then pass "
                           f"weights='<path to the .pth file>'")
    if not isinstance(weights, (str, os.PathLike)):
        raise TypeError(f"weights must be None, a file path or a {weights_enum.__name__}; got {weights!r}")
    path = os.fspath(weights)
    if os.path.isdir(path):
        raise IsADirectoryError(f"weights={path!r} is a directory; pass the path of a .pth or .safetensors file")
    if not os.path.exists(path):
        raise FileNotFoundError(f"weights={path!r}: no such file, and not a weight set of {weights_enum.__name__} "
                                f"({', '.join(weights_enum.__members__)})")
    try:
        model.load_state_dict(minidl.load(path, map_location="cpu"), strict=True)
    except RuntimeError as e:
        raise RuntimeError(f"weights={path!r}: {e}") from None
    return model


def register_model(weights_enum: type):
    """Decorator: make a builder known to :func:`get_model` and :func:`list_models` by its function name, with
    its weights enum (:func:`get_model_weights`)."""
    def register(builder):
        builder.weights_enum = weights_enum
        _BUILDERS[builder.__name__] = builder
        return builder
    return register


def list_models() -> list:
    """The names of every registered builder, sorted."""
    return sorted(_BUILDERS)


def get_model_builder(name: str):
    if name.lower() not in _BUILDERS:
        raise ValueError(f"Unknown model {name!r}; minidl.vision.models has {', '.join(list_models())}")
    return _BUILDERS[name.lower()]


def get_model(name: str, **config):
    """The model built by the builder called ``name``, with ``config`` (``weights=``, ``num_classes=``...)."""
    return get_model_builder(name)(**config)


def get_model_weights(name):
    """The weights enum of a builder (or a builder's name)."""
    builder = get_model_builder(name) if isinstance(name, str) else name
    return builder.weights_enum
