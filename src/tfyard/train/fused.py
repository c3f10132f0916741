"""Fused batch norm for the Keras BatchNormalization layers of a model tfyard trains.

Keras 3 normalises with separate moments and elementwise ops: about ten passes over every
activation forward and more backward. TensorFlow's FusedBatchNormV3 (oneDNN on CPU, cuDNN on
GPU, one HLO under XLA) does each direction in one op: ResNet-20's step ran 1.24x faster on
a 2-core CPU (benchmarks/RESULTS.md), with the same results within float32 rounding. The
layers keep their class, weights and config, so checkpoints, `.keras` files and exports do
not change; only how `call` computes. Layers it cannot reproduce exactly keep Keras' call.
"""

from __future__ import annotations

import types

import keras
import tensorflow as tf

from tfyard import compat

HALF_DTYPES = (tf.bfloat16, tf.float16)   # FusedBatchNormV3's T besides float32; U stays float32
MIN_EPSILON = 1e-5  # cuDNN's smallest; tf.nn's wrapper would even raise it to 1.001e-5


def fuse_batch_norm(model) -> int:
    """Give every eligible BatchNormalization of `model` the fused call; returns how many."""
    layers = [layer for layer in compat.all_layers(model) if _eligible(layer)]
    for layer in layers:
        layer.call = types.MethodType(_fused_call, layer)
    return len(layers)


def _eligible(layer) -> bool:
    """Plain batch norm over the last axis: no renorm, no cross-replica statistics."""
    return (type(layer) is keras.layers.BatchNormalization and not compat.uses_renorm(layer)
            and not layer.synchronized and layer.axis in (-1, 3)
            and layer.epsilon >= MIN_EPSILON)


def _fused_call(self, inputs, training=None, mask=None):
    """Keras' BatchNormalization.call, computed by FusedBatchNormV3 on 4-D inputs."""
    if mask is not None or inputs.shape.rank != 4:
        return type(self).call(self, inputs, training=training, mask=mask)
    # The op takes bfloat16 and float16 activations as they are and accumulates its
    # statistics in float32 as Keras does: a cast each way around it was 2 more passes over
    # every activation of a mixed-precision step (benchmarks/RESULTS.md, issue 66).
    x = inputs if inputs.dtype in HALF_DTYPES else tf.cast(inputs, tf.float32)
    channels = x.shape[-1]
    gamma = tf.cast(self.gamma, tf.float32) if self.scale else tf.ones([channels])
    beta = tf.cast(self.beta, tf.float32) if self.center else tf.zeros([channels])
    if training and self.trainable:
        y, mean, variance = _fused(x, gamma, beta, tf.constant([]), tf.constant([]),
                                   self.epsilon, training=True)
        # its batch variance has Bessel's correction; Keras averages the biased one
        count = tf.cast(tf.size(x) // channels, tf.float32)
        variance = variance * (count - 1.0) / tf.maximum(count, 1.0)
        for moving, batch in ((self.moving_mean, mean), (self.moving_variance, variance)):
            moving.assign(tf.cast(moving, tf.float32) * self.momentum
                          + batch * (1.0 - self.momentum))
    else:
        y, _, _ = _fused(x, gamma, beta, tf.cast(self.moving_mean, tf.float32),
                         tf.cast(self.moving_variance, tf.float32), self.epsilon,
                         training=False)
    return tf.cast(y, self.compute_dtype)


def _fused(x, gamma, beta, mean, variance, epsilon: float, training: bool):
    """(y, batch mean, batch variance): the op itself, with the layer's own epsilon."""
    y, mean, variance, *_ = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=gamma, offset=beta, mean=mean, variance=variance, epsilon=epsilon,
        is_training=training)
    return y, mean, variance
