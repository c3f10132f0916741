"""FLOPs counted from a model's layers: exact on layers counted by hand, and ResNet-50's
published 4.1 G multiply-adds an image."""

from __future__ import annotations

import keras
import pytest

from tfyard.bench.flops import forward_flops, step_flops
from tfyard.models import create_model


def test_each_kernel_weight_is_two_flops_at_each_output_position():
    inputs = keras.Input((6, 6, 2))
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same")(inputs)        # 3x3 out
    x = keras.layers.BatchNormalization()(x)                               # not counted
    x = keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x)  # 3x3 out
    x = keras.layers.Conv2DTranspose(4, 2, strides=2)(x)                   # 3x3 in
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(10)(x)
    model = keras.Model(inputs, outputs)
    conv, depthwise, transposed, dense = 3 * 3 * 2 * 8, 3 * 3 * 8, 2 * 2 * 4 * 8, 4 * 10
    expected = 2 * (conv * 9 + depthwise * 9 + transposed * 9 + dense)
    assert forward_flops(model) == expected
    assert step_flops(model, 16) == 3 * expected * 16


def test_nested_models_are_counted_once():
    inner = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inner(inputs)))
    assert forward_flops(model) == 2 * (4 * 3 + 3 * 2)


def test_resnet50_is_its_published_4_1_g_multiply_adds():
    assert forward_flops(create_model("resnet50", 1000)) / 2 == pytest.approx(4.09e9, rel=0.01)


def test_a_subclassed_model_is_not_counted():
    class Mine(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            return self.dense(x)

    model = Mine()
    model(keras.ops.zeros((1, 4)))
    assert forward_flops(model) is None and step_flops(model, 8) is None
