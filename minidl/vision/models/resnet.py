"""Residual networks (He et al., 2015) as torchvision builds them: the same module names, so torchvision's weight
files load, and the same variants: ResNet-18/34 of basic blocks, ResNet-50/101 of bottlenecks (stride on the 3x3
convolution, "v1.5"), ResNeXt (grouped bottlenecks) and Wide ResNet (twice the bottleneck width)."""
from __future__ import annotations

from minidl import nn

from ._api import Default, WeightsEnum, load_weights, register_model
from ._utils import init_conv_and_norm, published

# torchvision's exports (the blocks stay in the module: models.resnet.Bottleneck)
__all__ = ["ResNet", "ResNet18_Weights", "ResNet34_Weights", "ResNet50_Weights", "ResNet101_Weights",
           "ResNeXt50_32X4D_Weights", "Wide_ResNet50_2_Weights", "resnet18", "resnet34", "resnet50", "resnet101",
           "resnext50_32x4d", "wide_resnet50_2"]


def conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1, dilation: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=dilation, groups=groups, bias=False,
                     dilation=dilation)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions and a shortcut; the first convolution (and ``downsample``) carries the stride."""
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample=None, groups: int = 1,
                 base_width: int = 64, dilation: int = 1, norm_layer=None) -> None:
        super().__init__()
        norm_layer = nn.BatchNorm2d if norm_layer is None else norm_layer
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")
        if dilation > 1:
            raise NotImplementedError("Dilation > 1 not supported in BasicBlock")
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (grouped, strided, dilated), 1x1 expand by ``expansion``, and a shortcut."""
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample=None, groups: int = 1,
                 base_width: int = 64, dilation: int = 1, norm_layer=None) -> None:
        super().__init__()
        norm_layer = nn.BatchNorm2d if norm_layer is None else norm_layer
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = norm_layer(width)
        self.conv2 = conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm_layer(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """A 7x7 stem, four stages of ``layers[i]`` blocks (64, 128, 256, 512 planes; each stage after the first
    halves the resolution, or dilates instead where ``replace_stride_with_dilation`` says), average pooling and a
    linear classifier. ``zero_init_residual`` starts each block's last norm at zero, so every block starts as the
    identity (Goyal et al., 2017)."""

    def __init__(self, block, layers: list, num_classes: int = 1000, zero_init_residual: bool = False,
                 groups: int = 1, width_per_group: int = 64, replace_stride_with_dilation=None,
                 norm_layer=None) -> None:
        super().__init__()
        self._norm_layer = nn.BatchNorm2d if norm_layer is None else norm_layer
        self.inplanes, self.dilation = 64, 1
        if replace_stride_with_dilation is None:
            replace_stride_with_dilation = [False, False, False]
        if len(replace_stride_with_dilation) != 3:
            raise ValueError("replace_stride_with_dilation should be None "
                             f"or a 3-element tuple, got {replace_stride_with_dilation}")
        self.groups, self.base_width = groups, width_per_group
        self.conv1 = nn.Conv2d(3, self.inplanes, 7, stride=2, padding=3, bias=False)
        self.bn1 = self._norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2, dilate=replace_stride_with_dilation[0])
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2, dilate=replace_stride_with_dilation[1])
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2, dilate=replace_stride_with_dilation[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        init_conv_and_norm(self)
        if zero_init_residual:
            for module in self.modules():
                if isinstance(module, Bottleneck) and module.bn3.weight is not None:
                    nn.init.zeros_(module.bn3.weight)
                elif isinstance(module, BasicBlock) and module.bn2.weight is not None:
                    nn.init.zeros_(module.bn2.weight)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1, dilate: bool = False) -> nn.Sequential:
        """One stage: the first block changes width and resolution (with a 1x1 projection shortcut where the
        shapes change); a dilated stage keeps the resolution and grows the dilation of its later blocks."""
        downsample, previous_dilation = None, self.dilation
        if dilate:
            self.dilation, stride = self.dilation * stride, 1
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       self._norm_layer(planes * block.expansion))
        stage = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width, previous_dilation,
                       self._norm_layer)]
        self.inplanes = planes * block.expansion
        stage += [block(self.inplanes, planes, groups=self.groups, base_width=self.base_width,
                        dilation=self.dilation, norm_layer=self._norm_layer) for _ in range(1, blocks)]
        return nn.Sequential(*stage)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def _set_fixed(kwargs: dict, name: str, value) -> None:
    """A builder's fixed constructor argument (ResNeXt's ``groups``...): a caller may repeat it, not change it."""
    if name in kwargs and kwargs[name] != value:
        raise ValueError(f"The parameter '{name}' expected value {value} but got {kwargs[name]} instead.")
    kwargs[name] = value


class ResNet18_Weights(WeightsEnum):
    IMAGENET1K_V1 = published("resnet18-f37072fd.pth", 11689512)
    DEFAULT = Default("IMAGENET1K_V1")


class ResNet34_Weights(WeightsEnum):
    IMAGENET1K_V1 = published("resnet34-b627a593.pth", 21797672)
    DEFAULT = Default("IMAGENET1K_V1")


class ResNet50_Weights(WeightsEnum):
    IMAGENET1K_V1 = published("resnet50-0676ba61.pth", 25557032)
    IMAGENET1K_V2 = published("resnet50-11ad3fa6.pth", 25557032, resize_size=232)
    DEFAULT = Default("IMAGENET1K_V2")


class ResNet101_Weights(WeightsEnum):
    IMAGENET1K_V1 = published("resnet101-63fe2227.pth", 44549160)
    IMAGENET1K_V2 = published("resnet101-cd907fc2.pth", 44549160, resize_size=232)
    DEFAULT = Default("IMAGENET1K_V2")


class ResNeXt50_32X4D_Weights(WeightsEnum):
    IMAGENET1K_V1 = published("resnext50_32x4d-7cdf4587.pth", 25028904)
    IMAGENET1K_V2 = published("resnext50_32x4d-1a0047aa.pth", 25028904, resize_size=232)
    DEFAULT = Default("IMAGENET1K_V2")


class Wide_ResNet50_2_Weights(WeightsEnum):
    IMAGENET1K_V1 = published("wide_resnet50_2-95faca4d.pth", 68883240)
    IMAGENET1K_V2 = published("wide_resnet50_2-9ba9bcbe.pth", 68883240, resize_size=232)
    DEFAULT = Default("IMAGENET1K_V2")


@register_model(ResNet18_Weights)
def resnet18(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    return load_weights(ResNet(BasicBlock, [2, 2, 2, 2], **kwargs), weights, ResNet18_Weights)


@register_model(ResNet34_Weights)
def resnet34(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    return load_weights(ResNet(BasicBlock, [3, 4, 6, 3], **kwargs), weights, ResNet34_Weights)


@register_model(ResNet50_Weights)
def resnet50(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    return load_weights(ResNet(Bottleneck, [3, 4, 6, 3], **kwargs), weights, ResNet50_Weights)


@register_model(ResNet101_Weights)
def resnet101(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    return load_weights(ResNet(Bottleneck, [3, 4, 23, 3], **kwargs), weights, ResNet101_Weights)


@register_model(ResNeXt50_32X4D_Weights)
def resnext50_32x4d(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    _set_fixed(kwargs, "groups", 32)
    _set_fixed(kwargs, "width_per_group", 4)
    return load_weights(ResNet(Bottleneck, [3, 4, 6, 3], **kwargs), weights, ResNeXt50_32X4D_Weights)


@register_model(Wide_ResNet50_2_Weights)
def wide_resnet50_2(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    _set_fixed(kwargs, "width_per_group", 128)
    return load_weights(ResNet(Bottleneck, [3, 4, 6, 3], **kwargs), weights, Wide_ResNet50_2_Weights)
