"""Real Keras models from the registry: published sizes, forward passes, precision, init."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest

from tfyard.errors import UserError
from tfyard.models import (
    MODELS,
    count_params,
    create_model,
    min_input_size,
    multiply_adds,
    scoped_dtype_policy,
)


@functools.cache
def _tiny(name, num_classes=1000):
    """`name` at its smallest input, for ImageNet's 1000 classes unless told, built once for
    the tests that only look."""
    size = min_input_size(name)
    return create_model(name, num_classes, (size, size, MODELS[name].input_shape[2]))


@functools.cache
def _full(name):
    """`name` for 1000 classes at its default input size, built but never run."""
    return create_model(name, 1000)


def _bn_statistics(model) -> int:
    return sum(int(np.prod(w.shape)) for w in model.non_trainable_weights
               if w.name in ("moving_mean", "moving_variance"))


@pytest.mark.parametrize(("name", "expected", "build"), [  # resnet50: tests/models/test_cli.py
    ("resnet101", 44_549_160, _tiny),   # global pooling: the count is the same at every size
    ("vgg_19", 143_667_240, _full),     # its dense head sees 7x7x512: a 224x224 input
])
def test_published_parameter_counts(name, expected, build):
    model = build(name)
    assert count_params(model) == expected
    assert model.count_params() == expected + _bn_statistics(model)


def test_cifar_resnet56_has_085_million_parameters():
    model = _tiny("cifar_resnet56", 10)   # global pooling: the count is the same at every size
    assert count_params(model) == 853_018  # He et al. table 6: 0.85 M (option A shortcuts)
    assert len([w for w in model.trainable_weights if w.name == "kernel"]) == 56


def test_multiply_adds_counts_each_priced_layer():
    images = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same")(images)  # 8x8 out, 3*3*3*8 kernel
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)  # 8x8 out, 3*3*8 kernel
    x = keras.layers.SeparableConv2D(4, 3, padding="valid")(x)  # 6x6 out, 3*3*8 + 8*4
    x = keras.layers.BatchNormalization()(keras.layers.Flatten()(x))
    logits = keras.layers.Dense(10)(x)  # 144 * 10
    model = keras.Model(images, logits)
    assert multiply_adds(model) == 64 * 216 + 64 * 72 + 36 * (72 + 32) + 1440


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_builds_and_runs_a_tiny_batch(name):
    model = _tiny(name)
    assert model.name == name
    images = np.random.default_rng(0).uniform(size=(2, *model.input_shape[1:]))
    logits = model(images, training=False)
    assert tuple(logits.shape) == (2, 1000)
    assert logits.dtype == "float32"
    assert np.isfinite(keras.ops.convert_to_numpy(logits)).all()
    assert not any(getattr(layer, "kernel_regularizer", None) for layer in model.layers)


@pytest.mark.parametrize(("name", "policy"), [
    ("resnet18", "mixed_bfloat16"), ("cifar_resnet20", "float16"),
    ("mnist_cnn", "mixed_float16"), ("mobilenet_v2", "bfloat16")])
def test_mixed_precision_computes_low_and_emits_float32_logits(name, policy):
    shape = MODELS[name].input_shape[:2]
    size = min(min_input_size(name), shape[0])
    model = create_model(name, 5, (size, size, MODELS[name].input_shape[2]), policy)
    low = "bfloat16" if "bfloat16" in policy else "float16"
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert convs and all(layer.compute_dtype == low for layer in convs)
    assert all(w.dtype == "float32" for w in model.trainable_weights)
    assert model(np.zeros((1, size, size, model.input_shape[-1]))).dtype == "float32"
    assert keras.config.dtype_policy().name == "float32"


def test_policy_scope_restores_on_error_and_rejects_unknown_policies():
    keras.config.set_dtype_policy("mixed_float16")
    try:
        with pytest.raises(RuntimeError), scoped_dtype_policy("bfloat16"):
            assert keras.config.dtype_policy().name == "mixed_bfloat16"
            raise RuntimeError
        assert keras.config.dtype_policy().name == "mixed_float16"
    finally:
        keras.config.set_dtype_policy("float32")
    with pytest.raises(UserError, match="unknown dtype policy"):
        create_model("mnist_mlp", 10, dtype_policy="int8")


@pytest.mark.parametrize(("name", "blocks", "last_bn"), [
    ("resnet50", 16, "_bn3"), ("cifar_resnet20", 9, "_bn2")])
def test_zero_init_residual_zeroes_the_last_gamma_of_each_block(name, blocks, last_bn):
    def gammas(model):
        return {layer.name: keras.ops.convert_to_numpy(layer.gamma) for layer in model.layers
                if isinstance(layer, keras.layers.BatchNormalization)}

    plain = gammas(_tiny(name))
    zeroed = gammas(create_model(name, 10, (32, 32, 3), zero_init_residual=True))
    assert plain.keys() == zeroed.keys()
    last = {n for n in zeroed if n.endswith(last_bn) and n.startswith("stage")}
    assert len(last) == blocks
    for layer_name, gamma in zeroed.items():
        assert (gamma == (0.0 if layer_name in last else 1.0)).all(), layer_name
    assert all((gamma == 1.0).all() for gamma in plain.values())


def test_batch_norm_settings_and_no_bias_in_resnet_convolutions():
    model = _tiny("resnet50")
    norms = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert norms and all(n.momentum == 0.9 and n.epsilon == 1e-5 for n in norms)
    strided = [layer.name for layer in model.layers
               if isinstance(layer, keras.layers.Conv2D) and layer.strides == (2, 2)]
    assert [n for n in strided if n.endswith("_conv2")] == [  # v1.5: stride on the 3x3
        "stage2_block1_conv2", "stage3_block1_conv2", "stage4_block1_conv2"]
    assert not any(getattr(layer, "use_bias", False) for layer in model.layers
                   if isinstance(layer, keras.layers.Conv2D))


def test_weight_paths_are_stable_between_builds():
    names = ("resnet18", "mobilenet_v2")
    first = [[w.path for w in _tiny(name).weights] for name in names]
    create_model("cifar_resnet20", 10)
    again = [[w.path for w in create_model(name, 10, (32, 32, 3)).weights] for name in names]
    assert again == first


def test_keras_file_round_trip_needs_no_custom_code(tmp_path):
    model = _tiny("cifar_resnet20")
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    images = np.random.default_rng(1).uniform(size=(2, *model.input_shape[1:]))
    np.testing.assert_allclose(loaded(images), model(images), rtol=1e-5, atol=1e-6)


def test_user_errors_for_bad_arguments():
    with pytest.raises(UserError, match="at least 75x75"):
        create_model("inception_v3", 10, (64, 64, 3))
    with pytest.raises(UserError, match="ResNets only"):
        create_model("mnist_cnn", 10, zero_init_residual=True)
    with pytest.raises(UserError, match="num_classes"):
        create_model("mnist_cnn", 0)
    with pytest.raises(UserError, match="did you mean"):
        create_model("resnet_50", 10)
