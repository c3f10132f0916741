"""ResNets built with the Keras functional API, stable layer names, float32 logits.

`imagenet_resnet`: ResNet v1.5 (stride on the 3x3 convolution, projection shortcuts).
`cifar_resnet`: He et al. CIFAR ResNet (depth 6n+2, 16/32/64 filters, option A shortcuts:
subsample and zero-pad, so no extra parameters - ResNet-56 has 0.85 M).
Batch norm uses momentum 0.9 and epsilon 1e-5; convolutions start from He normal (fan-out)
as in the v1.5 reference; no regularizers here, the training loop applies L2 to kernels.
`zero_init_residual` starts the last batch-norm gamma of every block at zero so each block
begins as the identity.
"""

from __future__ import annotations

import keras
from keras import layers

# depth -> (block kind, blocks per stage); stage s has 64 * 2**s filters (x4 out for bottleneck)
_IMAGENET_LAYOUT = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
    200: ("bottleneck", (3, 24, 36, 3)),
}


def _conv(x, filters, kernel, stride, name):
    init = keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")
    return layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False,
                         kernel_initializer=init, name=name)(x)


def _bn(x, name, zero_gamma=False):
    return layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=name,
                                     gamma_initializer="zeros" if zero_gamma else "ones")(x)


def _relu(x, name):
    return layers.Activation("relu", name=name)(x)


def _projection(x, filters, stride, name):
    """Shortcut by 1x1 convolution + batch norm (ImageNet)."""
    return _bn(_conv(x, filters, 1, stride, f"{name}_proj_conv"), f"{name}_proj_bn")


def _zero_pad(x, filters, stride, name):
    """Shortcut by subsampling and appending as many zero channels (CIFAR option A: each
    stage doubles the filters). Built-in layers only, so `.keras` files load without code."""
    x = layers.MaxPooling2D(1, strides=stride, name=f"{name}_subsample")(x)
    zeros = layers.Rescaling(0.0, name=f"{name}_zeros")(x)
    return layers.Concatenate(name=f"{name}_pad")([x, zeros])


def _basic(x, filters, stride, name, zero_gamma, shortcut):
    short = x
    if stride != 1 or x.shape[-1] != filters:
        short = shortcut(x, filters, stride, name)
    y = _relu(_bn(_conv(x, filters, 3, stride, f"{name}_conv1"), f"{name}_bn1"), f"{name}_relu1")
    y = _bn(_conv(y, filters, 3, 1, f"{name}_conv2"), f"{name}_bn2", zero_gamma)
    return _relu(layers.Add(name=f"{name}_add")([y, short]), f"{name}_out")


def _bottleneck(x, filters, stride, name, zero_gamma, shortcut):
    short = x
    if stride != 1 or x.shape[-1] != 4 * filters:
        short = shortcut(x, 4 * filters, stride, name)
    y = _relu(_bn(_conv(x, filters, 1, 1, f"{name}_conv1"), f"{name}_bn1"), f"{name}_relu1")
    y = _relu(_bn(_conv(y, filters, 3, stride, f"{name}_conv2"), f"{name}_bn2"), f"{name}_relu2")
    y = _bn(_conv(y, 4 * filters, 1, 1, f"{name}_conv3"), f"{name}_bn3", zero_gamma)
    return _relu(layers.Add(name=f"{name}_add")([y, short]), f"{name}_out")


def _stages(x, block, widths, blocks, zero_gamma, shortcut):
    for s, (filters, count) in enumerate(zip(widths, blocks, strict=True)):
        for b in range(count):
            stride = 2 if s > 0 and b == 0 else 1
            x = block(x, filters, stride, f"stage{s + 1}_block{b + 1}", zero_gamma, shortcut)
    return x


def _head(images, x, num_classes, name):
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    init = keras.initializers.RandomNormal(stddev=0.01)
    logits = layers.Dense(num_classes, kernel_initializer=init, dtype="float32", name="logits")(x)
    return keras.Model(images, logits, name=name)


def imagenet_resnet(depth, num_classes, input_shape, zero_init_residual=False, name=None):
    kind, blocks = _IMAGENET_LAYOUT[depth]
    block = _basic if kind == "basic" else _bottleneck
    images = keras.Input(shape=input_shape, name="images")
    x = _relu(_bn(_conv(images, 64, 7, 2, "stem_conv"), "stem_bn"), "stem_relu")
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(x)
    x = _stages(x, block, (64, 128, 256, 512), blocks, zero_init_residual, _projection)
    return _head(images, x, num_classes, name or f"resnet{depth}")


def cifar_resnet(depth, num_classes, input_shape, zero_init_residual=False, name=None):
    if (depth - 2) % 6:
        raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
    images = keras.Input(shape=input_shape, name="images")
    x = _relu(_bn(_conv(images, 16, 3, 1, "stem_conv"), "stem_bn"), "stem_relu")
    x = _stages(x, _basic, (16, 32, 64), [(depth - 2) // 6] * 3, zero_init_residual, _zero_pad)
    return _head(images, x, num_classes, name or f"cifar_resnet{depth}")
