"""FLOPs of a training step, counted from the model's layers, so a benchmark can say how much
of the device's peak its images/sec reach.

Every kernel weight of a convolution or dense layer is one multiply-add (2 FLOPs) at each
position of its output (of its input, for a transposed convolution). Batch norm,
activations, pooling and the update are left out: they are a few FLOPs an activation,
against hundreds for the kernels. Training is counted as 3 x the forward pass (the
backward pass computes the gradients of the inputs and of the weights, each as costly).
"""

from __future__ import annotations

import math

from tfyard import compat

HOW = ("counted from the layers: 2 FLOPs per kernel weight per output position of each "
       "convolution and dense layer (batch norm, activations, pooling and the update left "
       "out); a training step = 3 x forward")
TRAINING_PER_FORWARD = 3


def forward_flops(model) -> int | None:
    """Forward FLOPs of one example, or None when a layer does not say its output shape (a
    subclassed model's layers, a layer called twice)."""
    import keras

    kinds = (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D,
             keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D,
             keras.layers.SeparableConv1D, keras.layers.SeparableConv2D, keras.layers.Dense)
    transposed = (keras.layers.Conv1DTranspose, keras.layers.Conv2DTranspose,
                  keras.layers.Conv3DTranspose)
    total = 0
    for layer in compat.all_layers(model):
        if not isinstance(layer, kinds + transposed):
            continue
        kernels = [w for w in layer.weights if "kernel" in w.path.rsplit("/", 1)[-1]]
        try:
            shape = (layer.input if isinstance(layer, transposed) else layer.output).shape
        except (AttributeError, ValueError):
            return None
        positions = shape[2:] if getattr(layer, "data_format", None) == "channels_first" \
            else shape[1:-1]
        if any(d is None for d in positions):
            return None
        total += 2 * sum(math.prod(w.shape) for w in kernels) * math.prod(positions)
    return total


def step_flops(model, global_batch: int) -> int | None:
    """FLOPs of one training step over the global batch (see HOW), or None if uncounted."""
    forward = forward_flops(model)
    return forward and TRAINING_PER_FORWARD * forward * global_batch
