"""ResNet, VGG, MobileNetV2/V3 and EfficientNet beyond what tests/test_vision_models_torchvision.py's recording
covers: builder arguments (num_classes, zero_init_residual, groups and widths, dilation, width_mult, dropout,
stochastic depth), their errors, initialisation, weight sets, stochastic depth itself, and training. Expected values
are facts learnt from torchvision 0.29.1 (torch 2.14.1), which the suite cannot import: parameter counts, error
messages, and the outputs, losses and gradient norms torchvision computed in float64 under
tests/torchvision_reference.py's synthetic weights."""
import json
import math
import os

import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.vision import models
from minidl.vision.models.efficientnet import EfficientNet, MBConv, MBConvConfig
from minidl.vision.models.mobilenetv2 import InvertedResidual
from minidl.vision.models.mobilenetv3 import InvertedResidual as V3InvertedResidual
from minidl.vision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3
from minidl.vision.models.resnet import BasicBlock, Bottleneck
from minidl.vision.ops import StochasticDepth, stochastic_depth

import torchvision_reference as ref

OURS = ["resnet18", "resnet34", "resnet50", "resnet101", "wide_resnet50_2", "resnext50_32x4d", "vgg11_bn",
        "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0"]
with open(os.path.join(os.path.dirname(__file__), "data", "torchvision.json")) as _f:
    RECORDED = json.load(_f)["models"]


def on_meta(builder, **kwargs):
    """A model's structure without drawing its weights (VGG's 133 million take seconds)."""
    with minidl.device("meta"):
        return builder(**kwargs)


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def with_synthetic_weights(model):
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict({k: minidl.from_numpy(v) for k, v in ref.synthetic_state(shapes).items()}, strict=True)
    return model.double()


# torchvision's parameter counts of other configurations
COUNTS = [("resnet18", dict(num_classes=10), 11181642), ("resnet50", dict(groups=2, width_per_group=32), 19898408),
          ("resnet50", dict(replace_stride_with_dilation=[False, True, True]), 25557032),
          ("mobilenet_v2", dict(width_mult=0.5), 1968680), ("mobilenet_v2", dict(width_mult=1.4), 6108776),
          ("mobilenet_v3_small", dict(width_mult=0.75), 1653920),
          ("mobilenet_v3_small", dict(reduced_tail=True), 1099672),
          ("mobilenet_v3_small", dict(dilated=True), 2542856), ("vgg11_bn", dict(num_classes=10), 128812810)]


@pytest.mark.parametrize("name,kwargs,want", COUNTS)
def test_other_configurations_count_as_torchvisions(name, kwargs, want):
    assert count(on_meta(getattr(models, name), **kwargs)) == want


@pytest.mark.parametrize("name", OURS)
def test_num_classes_and_registry(name):
    assert name in models.list_models()
    assert models.get_model_builder(name) is getattr(models, name)
    model = on_meta(models.get_model, name=name, num_classes=3, progress=False)
    assert list(model.parameters())[-1].shape == (3,)   # the classifier's bias comes last in every family
    assert models.get_model_weights(name) is getattr(models, name).weights_enum


# torchvision's eval outputs (float64, the first two of 4 x 3 x 64 x 64 images), then its training-mode loss (labels
# 1, 2, 3, 4) and gradient norms
TRAINING = {
    "resnext_dilated": (
        models.resnext50_32x4d, dict(num_classes=5, replace_stride_with_dilation=[False, True, True]),
        [[3.3501502442553273, 1.454504269040717, 3.001409970152941, -1.823435649341055, -1.9327357582873812],
         [3.3390279539041563, 1.4616355915612282, 2.920832532742705, -1.9026633524950336, -1.8929397276941113]],
        2.1390729877249184,
        {"conv1.weight": 144.4015743049199, "layer2.1.bn3.weight": 0.857014690131976,
         "layer3.3.bn2.weight": 0.1559929947937098, "fc.weight": 22.147291300612807}),
    "mobilenet_v2_half": (
        models.mobilenet_v2, dict(num_classes=5, width_mult=0.5, dropout=0.0),
        [[-0.0036809673455814275, -0.026098358032028597, 0.28290117965660233, -0.07735656940068093,
          0.3020015359882655],
         [-0.033548281798752404, -0.016756688967976656, 0.3000741469241175, -0.060213322832801244,
          0.3272672068163175]],
        1.527666987979608,
        {"features.0.0.weight": 83.92103010723405, "features.6.conv.3.weight": 1.5181502019036774,
         "features.12.conv.2.weight": 8.593985374337112, "classifier.1.weight": 5.817631047100172}),
    "mobilenet_v3_small_dilated": (
        models.mobilenet_v3_small, dict(num_classes=5, dilated=True, reduced_tail=True, dropout=0.0),
        [[0.0809883827997147, -0.028181723124936095, -0.08752019498681568, -0.13336573738436702,
          -0.061309611664779114],
         [0.08100949263437901, -0.02817319757910229, -0.08751716808450868, -0.13334924097547782,
          -0.06131884040822854]],
        1.658875405780651,
        {"features.0.0.weight": 1.5838873992595606, "features.5.block.0.1.weight": 0.031146736341888956,
         "features.8.block.3.0.weight": 0.5024447425860696, "classifier.3.weight": 1.1848582152727454}),
    "efficientnet_b0": (
        models.efficientnet_b0, dict(num_classes=5, dropout=0.0, stochastic_depth_prob=0.0),
        [[0.046604378614212974, -0.04489154330865533, 0.01641933532098637, 0.08660983143059658,
          -0.04370913314525805],
         [0.046604356110373904, -0.04489208295961858, 0.016420024048026106, 0.08660823848957457,
          -0.04370872967779339]],
        1.5286589236646786,
        {"features.0.0.weight": 14.088745249907756, "features.4.0.block.1.1.weight": 0.9157245308281114,
         "features.5.2.block.3.1.weight": 0.25699809500921916, "classifier.1.weight": 5.192896443912487}),
}


@pytest.mark.parametrize("name", list(TRAINING))
def test_other_configurations_compute_and_train_as_torchvisions(name):
    """Dilation with groups, a width multiplier, MobileNetV3's dilated reduced tail, EfficientNet: eval outputs,
    then a training-mode step (batch statistics, every activation's backward)."""
    build, kwargs, want_out, want_loss, want_norms = TRAINING[name]
    model = with_synthetic_weights(build(**kwargs)).eval()
    x = minidl.from_numpy(ref._generator("images/" + name).standard_normal((4, 3, 64, 64)))
    with minidl.no_grad():
        np.testing.assert_allclose(model(x)[:2].numpy(), want_out, rtol=0, atol=1e-12)
    model.train()
    loss = nn.functional.cross_entropy(model(x), minidl.tensor([1, 2, 3, 4]))
    loss.backward()
    assert loss.item() == pytest.approx(want_loss, rel=1e-12)
    assert all(p.grad is not None and np.isfinite(p.grad.numpy()).all() for p in model.parameters())
    grads = dict(model.named_parameters())
    for key, norm in want_norms.items():
        assert grads[key].grad.norm().item() == pytest.approx(norm, rel=1e-11), key


@pytest.mark.parametrize("name", ["resnet18", "vgg11_bn", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0"])
def test_training_runs_and_dropout_acts_in_training_only(name):
    kwargs = {} if name.startswith("resnet") else dict(dropout=0.5)
    if name == "vgg11_bn":
        kwargs["init_weights"] = False   # nn's defaults only: VGG's 129 million weights drawn once, not twice
    model = getattr(models, name)(num_classes=4, **kwargs)
    x = minidl.randn(2, 3, 32, 32)
    model.eval()
    with minidl.no_grad():
        assert minidl.equal(model(x), model(x))
    model.train()
    minidl.manual_seed(0)
    out = model(x)
    assert out.shape == (2, 4)
    if name != "resnet18":
        assert not minidl.equal(out, model(x))
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_zero_init_residual_zeroes_each_blocks_last_norm():
    for builder, last in ((models.resnet18, "bn2"), (models.resnet50, "bn3")):
        model = builder(zero_init_residual=True)
        blocks = [m for m in model.modules() if isinstance(m, (BasicBlock, Bottleneck))]
        assert len(blocks) == (8 if builder is models.resnet18 else 16)
        for block in blocks:
            assert not getattr(block, last).weight.detach().numpy().any()
            assert (block.bn1.weight.detach().numpy() == 1).all()
        assert (getattr(builder().layer1[0], last).weight.detach().numpy() == 1).all()
    block = models.resnet18(zero_init_residual=True).eval().layer1[0]
    x = minidl.rand(2, 64, 8, 8)   # a block whose branch starts at zero passes a non-negative input through
    with minidl.no_grad():
        assert minidl.allclose(block(x), x)


def test_groups_and_widths():
    resnext, wide = on_meta(models.resnext50_32x4d), on_meta(models.wide_resnet50_2)
    assert resnext.layer1[0].conv2.groups == 32 and resnext.layer1[0].conv2.weight.shape == (128, 4, 3, 3)
    assert wide.layer1[0].conv2.weight.shape == (128, 128, 3, 3)
    assert wide.layer4[0].conv3.weight.shape == (2048, 1024, 1, 1)   # twice ResNet-50's bottleneck, same outputs
    assert on_meta(models.resnext50_32x4d, groups=32).layer1[0].conv2.groups == 32   # repeating it is allowed
    with pytest.raises(ValueError, match="The parameter 'groups' expected value 32 but got 16 instead."):
        models.resnext50_32x4d(groups=16)
    with pytest.raises(ValueError, match="The parameter 'width_per_group' expected value 128 but got 64 instead."):
        models.wide_resnet50_2(width_per_group=64)
    for kwargs in (dict(groups=2), dict(width_per_group=32)):
        with pytest.raises(ValueError, match="BasicBlock only supports groups=1 and base_width=64"):
            models.resnet18(**kwargs)


def test_replace_stride_with_dilation():
    model = on_meta(models.resnet50, replace_stride_with_dilation=[False, True, True])
    assert [(b.conv2.dilation, b.conv2.stride, b.conv2.padding) for b in model.layer4] == \
        [((2, 2), (1, 1), (2, 2)), ((4, 4), (1, 1), (4, 4)), ((4, 4), (1, 1), (4, 4))]
    assert [b.conv2.dilation for b in model.layer3] == [(1, 1)] + [(2, 2)] * 5
    assert model.layer4[0].downsample[0].stride == (1, 1)
    model = models.resnet50(replace_stride_with_dilation=[False, True, True]).eval()
    with minidl.no_grad():
        x = model.maxpool(model.relu(model.bn1(model.conv1(minidl.randn(1, 3, 64, 64)))))
        assert model.layer4(model.layer3(model.layer2(model.layer1(x)))).shape == (1, 2048, 8, 8)  # output stride 8
    with pytest.raises(NotImplementedError, match="Dilation > 1 not supported in BasicBlock"):
        models.resnet18(replace_stride_with_dilation=[False, False, True])
    with pytest.raises(ValueError, match=r"replace_stride_with_dilation should be None or a 3-element tuple, got "
                                         r"\[True\]"):
        models.resnet18(replace_stride_with_dilation=[True])


def test_width_mult_and_mobilenet_v3_tail():
    half, wide = on_meta(models.mobilenet_v2, width_mult=0.5), on_meta(models.mobilenet_v2, width_mult=1.4)
    assert (half.features[0][0].out_channels, half.last_channel) == (16, 1280)
    assert (wide.features[0][0].out_channels, wide.last_channel) == (48, 1792)
    small = on_meta(models.mobilenet_v3_small, width_mult=0.75)
    assert small.features[0][0].out_channels == 16 and small.classifier[0].out_features == 768
    dilated = on_meta(models.mobilenet_v3_small, dilated=True)
    depthwise = [block.block[1][0] for block in dilated.features[9:12]]
    assert [(c.dilation, c.stride, c.padding) for c in depthwise] == [((2, 2), (1, 1), (4, 4))] * 3
    reduced = on_meta(models.mobilenet_v3_small, reduced_tail=True)
    assert reduced.features[11].out_channels == 48 and reduced.classifier[0].out_features == 512


def test_dropout_arguments():
    assert [m.p for m in on_meta(models.vgg11_bn, dropout=0.3).modules() if isinstance(m, nn.Dropout)] == [0.3, 0.3]
    assert on_meta(models.mobilenet_v2, dropout=0.1).classifier[0].p == 0.1
    assert on_meta(models.mobilenet_v3_small, dropout=0.1).classifier[2].p == 0.1
    assert on_meta(models.efficientnet_b0, dropout=0.4).classifier[0].p == 0.4
    assert [on_meta(b).classifier[i].p for b, i in ((models.vgg11_bn, 2), (models.mobilenet_v2, 0),
                                                    (models.mobilenet_v3_small, 2), (models.efficientnet_b0, 0))] == \
        [0.5, 0.2, 0.2, 0.2]
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        models.mobilenet_v2(dropout=1.5)


def test_stochastic_depth_drops_whole_rows():
    x = minidl.ones(4000, 3, 2, 2)
    minidl.manual_seed(0)
    out = stochastic_depth(x, 0.3, "row").numpy().reshape(4000, -1)
    rows = out[:, 0]
    assert (out == rows[:, None]).all()   # each sample kept or dropped whole
    survivors = rows[rows != 0]
    np.testing.assert_allclose(survivors, 1 / 0.7, rtol=1e-6)   # scaled by 1 / (1 - p)
    assert abs((rows == 0).mean() - 0.3) < 5 * math.sqrt(0.3 * 0.7 / 4000)
    batch = [stochastic_depth(x, 0.5, "batch").numpy() for _ in range(40)]
    assert all(np.unique(b).size == 1 for b in batch) and {float(b.flat[0]) for b in batch} == {0.0, 2.0}
    assert not stochastic_depth(x, 1.0, "row").numpy().any()
    module = StochasticDepth(0.5, "row").eval()
    assert module(x) is x and stochastic_depth(x, 0.5, "row", training=False) is x
    assert stochastic_depth(x, 0.0, "row") is x
    with pytest.raises(ValueError, match="drop probability has to be between 0 and 1, but got 1.5"):
        stochastic_depth(x, 1.5, "row")
    with pytest.raises(ValueError, match="mode has to be either 'batch' or 'row'"):
        StochasticDepth(0.5, "col")(x)


def test_stochastic_depth_backward_scales_survivors():
    x = minidl.ones(64, 5, requires_grad=True)
    minidl.manual_seed(1)
    out = stochastic_depth(x, 0.25, "row")
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), out.detach().numpy())


def test_efficientnet_stochastic_depth_rises_linearly_over_its_blocks():
    for prob in (0.2, 0.5):
        model = on_meta(models.efficientnet_b0, stochastic_depth_prob=prob)
        blocks = [block for stage in model.features[1:8] for block in stage]
        assert all(isinstance(b, MBConv) for b in blocks) and len(blocks) == 16
        assert [b.stochastic_depth.p for b in blocks] == pytest.approx([prob * i / 16 for i in range(16)])
        assert all(b.stochastic_depth.mode == "row" for b in blocks)
    assert [b.use_res_connect for b in model.features[2]] == [False, True]
    model = models.efficientnet_b0(stochastic_depth_prob=0.9, num_classes=3).train()
    x = minidl.randn(4, 3, 32, 32)
    minidl.manual_seed(0)
    a = model(x)
    model.classifier[0].p = 0.0
    assert not minidl.equal(model(x), model(x))   # the blocks' draws differ from call to call
    a.sum().backward()


def test_initialisation_is_torchvisions():
    resnet = models.resnet50()
    for conv in (resnet.conv1, resnet.layer4[0].conv2):   # He-normal over the fan-out
        w = conv.weight.detach().numpy()
        fan_out = w.shape[0] * w.shape[2] * w.shape[3]
        assert w.std() == pytest.approx(math.sqrt(2.0 / fan_out), rel=0.05) and abs(w.mean()) < 0.1 * w.std()
    norms = [m for m in resnet.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all((m.weight.detach().numpy() == 1).all() and not m.bias.detach().numpy().any() for m in norms)
    bound = 1 / math.sqrt(2048)   # ResNet leaves its classifier to nn.Linear's default
    assert np.abs(resnet.fc.weight.detach().numpy()).max() <= bound
    for model in (models.mobilenet_v2(), models.mobilenet_v3_small()):
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        assert all(m.weight.detach().numpy().std() == pytest.approx(0.01, rel=0.05) for m in linears)
        assert not any(m.bias.detach().numpy().any() for m in linears)
        convs = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.bias is not None]
        assert not any(m.bias.detach().numpy().any() for m in convs)   # squeeze-excitation's biases start at 0
    head = models.efficientnet_b0().classifier[1].weight.detach().numpy()
    bound = 1 / math.sqrt(1000)
    assert np.abs(head).max() <= bound and head.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)


@pytest.mark.parametrize("name", OURS)
def test_weight_sets_are_torchvisions(name):
    """Every weight set's address, size and preprocessing, and the DEFAULT torchvision names."""
    enum = getattr(models, name).weights_enum
    recorded = RECORDED[name]["weights"]
    assert list(enum.__members__) == list(recorded)
    for weight_name, facts in recorded.items():
        weights = enum[weight_name]
        preset = weights.transforms()
        assert (preset.crop_size, preset.resize_size) == ([facts["crop_size"]], [facts["resize_size"]])
        assert (list(preset.mean), list(preset.std)) == (facts["mean"], facts["std"])
        assert preset.interpolation.value == facts["interpolation"]
        assert (weights.url, weights.meta["num_params"]) == (facts["url"], facts["num_params"])
    default = {"resnet18": "V1", "resnet34": "V1", "vgg11_bn": "V1", "mobilenet_v3_small": "V1",
               "efficientnet_b0": "V1"}.get(name, "V2")
    assert enum.DEFAULT is enum["IMAGENET1K_" + default] is enum.verify("DEFAULT")
    assert enum.verify(f"{enum.__name__}.IMAGENET1K_V1") is enum.IMAGENET1K_V1
    with pytest.raises(RuntimeError, match="downloads nothing.*" + enum.DEFAULT.url):
        on_meta(getattr(models, name), weights="DEFAULT")


def test_errors_are_torchvisions():
    with pytest.raises(ValueError, match=r"inverted_residual_setting should be non-empty or a 4-element list, got "
                                         r"\[\]"):
        models.mobilenet_v2(inverted_residual_setting=[])
    with pytest.raises(ValueError, match="4-element list"):
        models.mobilenet_v2(inverted_residual_setting=[[1, 16, 1]])
    with pytest.raises(ValueError, match="stride should be 1 or 2 instead of 3"):
        InvertedResidual(8, 8, 3, 6)
    with pytest.raises(ValueError, match="The inverted_residual_setting should not be empty"):
        MobileNetV3([], 10)
    with pytest.raises(TypeError, match=r"The inverted_residual_setting should be List\[InvertedResidualConfig\]"):
        MobileNetV3([1], 10)
    with pytest.raises(ValueError, match="illegal stride value"):
        V3InvertedResidual(InvertedResidualConfig(16, 3, 16, 16, True, "RE", 3, 1, 1.0), nn.BatchNorm2d)
    with pytest.raises(ValueError, match="The inverted_residual_setting should not be empty"):
        EfficientNet([], 0.2)
    with pytest.raises(TypeError, match=r"The inverted_residual_setting should be List\[MBConvConfig\]"):
        EfficientNet([1], 0.2)
    with pytest.raises(ValueError, match="illegal stride value"):
        MBConv(MBConvConfig(6, 3, 3, 16, 24, 1), 0.0, nn.BatchNorm2d)
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        models.resnet18(foo=1)
    with pytest.raises(ValueError, match="Unknown model"):
        models.get_model("resnet1000")
