"""torchvision's classification models (``torchvision.models``): the same builders, classes, module names and
weight-set enums, so a torchvision script and torchvision's weight files work with minidl."""
from ._api import *  # noqa: F401,F403
from .resnet import *  # noqa: F401,F403
