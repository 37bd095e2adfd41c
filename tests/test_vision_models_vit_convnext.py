"""vit_b_16 and convnext_tiny beyond what tests/test_vision_models_torchvision.py's recording covers: builder
arguments, other configurations of VisionTransformer and ConvNeXt, their errors, initialisation, stochastic depth,
and training. Expected values are facts learnt from torchvision 0.29.1 (torch 2.14.1), which the suite cannot
import: the small models' outputs, losses and gradient norms were computed by torchvision under
tests/torchvision_reference.py's synthetic weights, in float64."""
import math
from collections import OrderedDict

import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.vision import models
from minidl.vision.models.convnext import CNBlockConfig, ConvNeXt, LayerNorm2d
from minidl.vision.models.vision_transformer import ConvStemConfig, Encoder, VisionTransformer
from minidl.vision.ops import StochasticDepth

import torchvision_reference as ref


def small_vit(**kwargs):
    """2 layers of 2 heads, 16 features, MLP 32, 8 x 8 patches of 32 x 32 images."""
    return VisionTransformer(32, 8, 2, 2, 16, 32, **kwargs)


def small_convnext(**kwargs):
    return ConvNeXt([CNBlockConfig(8, 16, 1), CNBlockConfig(16, 24, 2)], num_classes=4, **kwargs)


def stem_vit():
    return VisionTransformer(32, 4, 2, 4, 16, 24, num_classes=3,
                             conv_stem_configs=[ConvStemConfig(8, 3, 2), ConvStemConfig(16, 3, 2)])


def on_meta(builder, **kwargs):
    """A full-size model's structure, without drawing its weights (seconds for ConvNeXt-T's)."""
    with minidl.device("meta"):
        return builder(**kwargs)


def with_synthetic_weights(model):
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict({k: minidl.from_numpy(v) for k, v in ref.synthetic_state(shapes).items()}, strict=True)
    return model.double()


def images(name: str):
    return minidl.from_numpy(ref._generator("images/" + name).standard_normal((2, 3, 32, 32)))


# torchvision's eval outputs of the small models (float64)
OUTPUTS = {
    "vit_small": (small_vit, dict(num_classes=5, representation_size=12),
                  [[-0.39644118621730295, -0.7841196288771615, -0.8565744718150136, -0.00475052738271042,
                    0.4142747304158911],
                   [-0.02200164917262826, -0.19703351803059688, -0.35090939529045495, 0.49063639687668753,
                    0.6388831265558627]]),
    "vit_stem": (stem_vit, {}, [[0.5587337931256022, 1.4652933940987922, -0.4164541992161811],
                                [0.5114901237631109, 1.4670218907063621, -0.43945199028542]]),
    "convnext_small": (small_convnext, dict(stochastic_depth_prob=0.3),
                       [[0.13450371014465, -0.8049075497022218, 0.6997307140493729, -0.4746642638442691],
                        [0.05689428104094163, -0.19584307706115595, -0.7291246035913068, 0.48037169642641386]]),
}


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_other_configurations_compute_as_torchvisions(name):
    """A pre-logits layer (representation_size), a convolutional stem, a ConvNeXt of two stages."""
    build, kwargs, want = OUTPUTS[name]
    model = with_synthetic_weights(build(**kwargs)).eval()
    with minidl.no_grad():
        out = model(images(name)).numpy()
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-12)


# torchvision's cross-entropy loss (labels 1, 2) in training mode without dropout, and gradient norms
TRAINING = {
    "vit_small": (lambda: small_vit(num_classes=5, representation_size=12), 2.1668692778128777, {
        "class_token": 14.885939075137973, "conv_proj.weight": 12.272899237677212,
        "encoder.pos_embedding": 14.909762909563048,
        "encoder.layers.encoder_layer_0.self_attention.in_proj_weight": 3.122673718090905,
        "encoder.layers.encoder_layer_1.mlp.0.weight": 1.0104561039320847,
        "heads.pre_logits.weight": 2.033115473882423}),
    "convnext_small": (small_convnext, 2.1782937977766137, {
        "features.0.0.weight": 4.97312373824118, "features.0.1.weight": 0.38151091481002164,
        "features.1.0.layer_scale": 0.26656851024618855, "features.3.1.block.0.weight": 1.114261836770155,
        "features.3.1.block.2.weight": 0.21795748582763613, "classifier.0.weight": 0.8499062550303256}),
}


@pytest.mark.parametrize("name", list(TRAINING))
def test_training_step_is_torchvisions(name):
    build, want_loss, want_norms = TRAINING[name]
    model = with_synthetic_weights(build()).train()
    loss = nn.functional.cross_entropy(model(images(name)), minidl.tensor([1, 2]))
    loss.backward()
    assert loss.item() == pytest.approx(want_loss, rel=1e-12)
    grads = {k: p.grad for k, p in model.named_parameters()}
    assert all(g is not None and np.isfinite(g.numpy()).all() for g in grads.values())
    for key, norm in want_norms.items():
        assert grads[key].norm().item() == pytest.approx(norm, rel=1e-11), key


def test_training_draws_dropout_and_stochastic_depth():
    """Dropout and stochastic depth act in training mode only; backward runs through them."""
    x = minidl.randn(8, 3, 32, 32)
    vit = small_vit(dropout=0.5, attention_dropout=0.5)
    nn.init.normal_(vit.heads.head.weight)   # torchvision starts the classifier at zero
    for model in (vit, small_convnext(stochastic_depth_prob=0.9, layer_scale=1.0)):
        model.eval()
        with minidl.no_grad():
            assert minidl.equal(model(x), model(x))
        model.train()
        minidl.manual_seed(0)
        a = model(x)
        assert not minidl.equal(a, model(x))
        a.sum().backward()
        assert all(p.grad is not None for p in model.parameters())


def test_vit_modules_and_state_dict_names():
    model = small_vit(num_classes=5, representation_size=12)
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    assert list(shapes)[:4] == ["class_token", "conv_proj.weight", "conv_proj.bias", "encoder.pos_embedding"]
    assert shapes["encoder.pos_embedding"] == [1, 17, 16] and model.seq_length == 17
    assert shapes["encoder.layers.encoder_layer_1.self_attention.in_proj_weight"] == [48, 16]
    assert list(shapes)[-6:] == ["encoder.ln.weight", "encoder.ln.bias", "heads.pre_logits.weight",
                                 "heads.pre_logits.bias", "heads.head.weight", "heads.head.bias"]
    assert [name for name, _ in model.heads.named_children()] == ["pre_logits", "act", "head"]
    assert isinstance(model.heads.act, nn.Tanh) and shapes["heads.head.weight"] == [5, 12]
    stem = {k: list(v.shape) for k, v in stem_vit().state_dict().items()}
    assert "conv_proj.conv_bn_relu_0.1.running_var" in stem
    assert stem["conv_proj.conv_bn_relu_1.0.weight"] == [16, 8, 3, 3]
    assert stem["conv_proj.conv_last.weight"] == [16, 16, 1, 1]


def test_vit_dropout_placement():
    model = small_vit(dropout=0.3, attention_dropout=0.2)
    dropouts = [(n, m.p) for n, m in model.named_modules() if isinstance(m, nn.Dropout)]
    where = ["encoder.dropout"] + [f"encoder.layers.encoder_layer_{i}.{name}" for i in (0, 1)
                                   for name in ("dropout", "mlp.2", "mlp.4")]
    assert dropouts == [(name, 0.3) for name in where]
    assert model.encoder.layers.encoder_layer_0.self_attention.dropout == 0.2


def test_vit_b_16_builder_arguments():
    """image_size sizes the position embeddings: at 384 the model has the SWAG end-to-end weights' shapes."""
    model = on_meta(models.vit_b_16, image_size=384)
    assert list(model.encoder.pos_embedding.shape) == [1, 577, 768] and model.image_size == 384
    swag = models.ViT_B_16_Weights.IMAGENET1K_SWAG_E2E_V1
    assert sum(p.numel() for p in model.parameters()) == swag.meta["num_params"]
    assert swag.meta["min_size"] == (384, 384)
    assert models.ViT_B_16_Weights.DEFAULT is models.ViT_B_16_Weights.IMAGENET1K_V1
    assert list(on_meta(models.vit_b_16, num_classes=10).heads.head.weight.shape) == [10, 768]
    assert models.get_model_weights("vit_b_16") is models.ViT_B_16_Weights
    assert {"vit_b_16", "convnext_tiny"} <= set(models.list_models())
    with pytest.raises(RuntimeError, match="downloads nothing.*vit_b_16_swag-9ac1b537.pth"):
        on_meta(models.vit_b_16, weights="IMAGENET1K_SWAG_E2E_V1", image_size=384)


def test_vit_errors_are_torchvisions():
    model = small_vit()
    with pytest.raises(AssertionError, match="^Wrong image height! Expected 32 but got 48!$"):
        model(minidl.zeros(1, 3, 48, 32))
    with pytest.raises(AssertionError, match="^Wrong image width! Expected 32 but got 40!$"):
        model(minidl.zeros(1, 3, 32, 40))
    with pytest.raises(AssertionError, match="^Input shape indivisible by patch size!$"):
        VisionTransformer(30, 8, 2, 2, 16, 32)
    with pytest.raises(AssertionError, match=r"Expected \(batch_size, seq_length, hidden_dim\) got"):
        model.encoder(minidl.zeros(17, 16))


def test_vit_initialisation_is_torchvisions():
    model = VisionTransformer(32, 4, 1, 2, 64, 128, representation_size=32)
    for zero in (model.class_token, model.conv_proj.bias, model.heads.head.weight, model.heads.head.bias,
                 model.heads.pre_logits.bias, model.encoder.layers[0].self_attention.in_proj_bias):
        assert not zero.detach().numpy().any()
    patch = model.conv_proj.weight.detach().numpy()   # truncated normal, std sqrt(1 / fan_in)
    assert patch.std() == pytest.approx(math.sqrt(1 / 48), rel=0.1)
    assert model.encoder.pos_embedding.detach().numpy().std() == pytest.approx(0.02, rel=0.1)
    mlp = model.encoder.layers[0].mlp
    assert 0 < np.abs(mlp[0].bias.detach().numpy()).max() < 1e-5     # N(0, 1e-6)
    bound = math.sqrt(6 / (64 + 128))                                  # Xavier uniform
    assert bound * 0.9 < np.abs(mlp[0].weight.detach().numpy()).max() <= bound
    stem = stem_vit().conv_proj.conv_last.weight.detach().numpy()     # N(0, sqrt(2 / out_channels))
    assert abs(stem.std() - math.sqrt(2 / 16)) < 0.15 * math.sqrt(2 / 16)


def test_mlp_block_loads_legacy_names():
    """torchvision's checkpoints from before 0.13 name the MLP's layers linear_1 and linear_2."""
    model = small_vit()
    state = OrderedDict((k.replace("mlp.0.", "mlp.linear_1.").replace("mlp.3.", "mlp.linear_2."), v + 1)
                        for k, v in model.state_dict().items())
    model.load_state_dict(state, strict=True)
    legacy = state["encoder.layers.encoder_layer_1.mlp.linear_2.bias"]
    assert minidl.equal(model.encoder.layers[1].mlp[3].bias, legacy)


def test_convnext_stochastic_depth_rises_linearly():
    """Block i of n drops with probability stochastic_depth_prob * i / (n - 1); convnext_tiny's default is 0.1."""
    probs = [m.p for m in on_meta(models.convnext_tiny).modules() if isinstance(m, StochasticDepth)]
    assert probs == pytest.approx([0.1 * i / 17 for i in range(18)], abs=1e-15)
    assert [m.p for m in small_convnext(stochastic_depth_prob=0.3).modules() if isinstance(m, StochasticDepth)] == \
        pytest.approx([0.0, 0.15, 0.3])
    assert all(m.mode == "row" for m in small_convnext().modules() if isinstance(m, StochasticDepth))


def test_convnext_builder_and_structure():
    model = on_meta(models.convnext_tiny, num_classes=7, stochastic_depth_prob=0.5)
    assert list(model.classifier[2].weight.shape) == [7, 768] and model.features[7][2].stochastic_depth.p == 0.5
    assert not (small_convnext(layer_scale=0.25).features[3][1].layer_scale.detach().numpy() - 0.25).any()
    assert models.ConvNeXt_Tiny_Weights.DEFAULT is models.ConvNeXt_Tiny_Weights.IMAGENET1K_V1
    shapes = {k: list(v.shape) for k, v in small_convnext().state_dict().items()}
    assert shapes["features.2.1.weight"] == [16, 8, 2, 2] and shapes["features.4.0.weight"] == [16]
    assert list(shapes)[-4:] == ["classifier.0.weight", "classifier.0.bias", "classifier.2.weight",
                                 "classifier.2.bias"] and shapes["classifier.0.weight"] == [24]
    assert repr(CNBlockConfig(8, None, 2)) == "CNBlockConfig(input_channels=8, out_channels=None, num_layers=2)"
    with pytest.raises(ValueError, match="The block_setting should not be empty"):
        ConvNeXt([])
    with pytest.raises(TypeError, match=r"The block_setting should be List\[CNBlockConfig\]"):
        ConvNeXt([1])


def test_convnext_initialisation_is_torchvisions():
    model = ConvNeXt([CNBlockConfig(64, None, 2)])
    block = model.features[1][0]
    assert not (block.layer_scale.detach().numpy() - 1e-6).any()
    for layer in (model.features[0][0], block.block[3], block.block[5], model.classifier[2]):
        w = layer.weight.detach().numpy()
        assert w.std() == pytest.approx(0.02, rel=0.1) and not layer.bias.detach().numpy().any()
    norm = model.classifier[0]
    assert (norm.weight.detach().numpy() == 1).all() and norm.eps == 1e-6


def test_layer_norm_2d_normalises_channels():
    norm = LayerNorm2d(6, eps=1e-6).double()
    nn.init.normal_(norm.weight)
    nn.init.normal_(norm.bias)
    x = np.random.default_rng(0).standard_normal((2, 6, 5, 4))
    normed = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-6)
    w, b = norm.weight.detach().numpy(), norm.bias.detach().numpy()
    np.testing.assert_allclose(norm(minidl.from_numpy(x)).detach().numpy(),
                               normed * w[:, None, None] + b[:, None, None], rtol=0, atol=1e-13)


def test_encoder_alone():
    """Encoder is usable by itself, as in torchvision: (N, seq, hidden) in and out."""
    encoder = Encoder(5, 1, 2, 8, 16, 0.0, 0.0)
    assert list(encoder(minidl.randn(3, 5, 8)).shape) == [3, 5, 8]
