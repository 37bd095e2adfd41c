"""torchvision's classification models (``torchvision.models``): the same builders, classes, module names and
weight-set enums, so a torchvision script and torchvision's weight files work with minidl."""
from ._api import *  # noqa: F401,F403
from .resnet import *  # noqa: F401,F403
from .vgg import *  # noqa: F401,F403
from .mobilenetv2 import *  # noqa: F401,F403
from .mobilenetv3 import *  # noqa: F401,F403
from .efficientnet import *  # noqa: F401,F403
from .convnext import *  # noqa: F401,F403
from .vision_transformer import *  # noqa: F401,F403
