"""Fused batch norm (`train.fused`): the same numbers as Keras' BatchNormalization, forward,
backward and in its moving statistics, and Keras' own call wherever it could differ."""

from __future__ import annotations

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfyard.models.factory import scoped_dtype_policy
from tfyard.train.fused import fuse_batch_norm


def convnet(**norm):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    x = keras.layers.BatchNormalization(**norm)(x)
    x = keras.layers.BatchNormalization(center=False, scale=False)(keras.layers.ReLU()(x))
    x = keras.layers.Dense(5)(keras.layers.GlobalAveragePooling2D()(x))
    return keras.Model(inputs, keras.layers.BatchNormalization()(x))   # 2-D: Keras' call


def twins(**norm):
    plain, fused = convnet(**norm), convnet(**norm)
    fused.set_weights(plain.get_weights())
    return plain, fused


def test_training_and_inference_match_keras():
    plain, fused = twins(momentum=0.9, epsilon=1e-5)   # the registry ResNets' epsilon
    assert fuse_batch_norm(fused) == 3
    x = tf.random.stateless_normal([6, 8, 8, 3], seed=[1, 2]) * 3.0 + 1.0
    for _ in range(3):   # moving statistics after a few updates
        with tf.GradientTape(persistent=True) as tape:
            ours, theirs = fused(x, training=True), plain(x, training=True)
        np.testing.assert_allclose(ours, theirs, atol=2e-5)
        for g, h in zip(tape.gradient(ours, fused.trainable_variables),
                        tape.gradient(theirs, plain.trainable_variables), strict=True):
            np.testing.assert_allclose(g, h, atol=2e-4)
    for ours, theirs in zip(fused.non_trainable_weights, plain.non_trainable_weights,
                            strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fused(x, training=False), plain(x, training=False), atol=2e-5)


def test_mixed_precision_keeps_the_compute_dtype():
    plain, fused = twins(dtype="mixed_bfloat16")
    fuse_batch_norm(fused)
    x = tf.random.stateless_normal([2, 8, 8, 3], seed=[3, 4])
    ours = fused.layers[2](tf.cast(fused.layers[1](x), tf.bfloat16), training=True)
    assert ours.dtype == tf.bfloat16


def as_float32(tensor):
    """numpy before 2 cannot compare bfloat16 arrays."""
    return tf.cast(tensor, tf.float32).numpy()


def test_half_precision_activations_reach_the_op_uncast():
    """bfloat16 in and out of FusedBatchNormV3 itself, no float32 copy around it, and the
    numbers within bfloat16's rounding of Keras' own."""
    with scoped_dtype_policy("mixed_bfloat16"):
        plain, fused = twins()
    fuse_batch_norm(fused)
    x = tf.random.stateless_normal([6, 8, 8, 3], seed=[5, 6]) * 3.0 + 1.0
    step = tf.function(lambda x: fused(x, training=True))
    ops = step.get_concrete_function(x).graph.get_operations()
    norms = [op for op in ops if op.type == "FusedBatchNormV3"]
    assert len(norms) == 2 and all(op.get_attr("T") == tf.bfloat16 for op in norms)
    np.testing.assert_allclose(as_float32(step(x)), as_float32(plain(x, training=True)),
                               atol=0.05)
    for ours, theirs in zip(fused.non_trainable_weights, plain.non_trainable_weights,
                            strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=0.02, atol=0.02)


RENORM = pytest.param({"renorm": True}, marks=pytest.mark.skipif(
    "renorm" not in inspect.signature(keras.layers.BatchNormalization).parameters,
    reason="Keras 3.14 added renorm"))


@pytest.mark.parametrize("norm", [RENORM, {"synchronized": True}, {"axis": 1},
                                  {"epsilon": 1e-6}])
def test_what_fusing_could_change_keeps_keras_call(norm):
    model = convnet(**norm)
    assert fuse_batch_norm(model) == 2   # the other two plain layers only
    assert "call" not in vars(model.layers[2])


def test_a_fused_model_saves_and_loads_as_keras(tmp_path):
    _, fused = twins()
    fuse_batch_norm(fused)
    fused.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert [type(layer) for layer in loaded.layers] == [type(layer) for layer in fused.layers]
    x = tf.ones([1, 8, 8, 3])
    np.testing.assert_allclose(loaded(x), fused(x), atol=1e-5)
