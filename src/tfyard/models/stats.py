"""Model size figures computed from the built Keras layers, without running the model."""

from __future__ import annotations

import math


def count_params(model) -> int:
    """Trainable parameters (batch-norm moving statistics are not trainable, so excluded)."""
    return sum(math.prod(w.shape) for w in model.trainable_weights)


def multiply_adds(model) -> int:
    """Multiply-adds for one image through a flat functional model.

    Every convolution, depthwise or separable convolution and dense layer costs one
    multiply-add per kernel entry at each output position, so the count is the output's
    spatial size times the layer's kernel sizes. Other layers are ignored (negligible).
    """
    import keras

    priced = (keras.layers.Conv2D, keras.layers.DepthwiseConv2D, keras.layers.SeparableConv2D,
              keras.layers.Dense)
    total = 0
    for layer in model.layers:
        if isinstance(layer, priced):
            positions = math.prod(layer.output.shape[1:-1])
            kernels = sum(math.prod(w.shape) for w in layer.weights if w.name.endswith("kernel"))
            total += positions * kernels
    return total
