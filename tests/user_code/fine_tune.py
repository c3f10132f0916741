"""A small convnet written as a user writes one, for the fine-tuning tests: a stem (conv,
batch norm), a body (conv, batch norm) and a classifier head, each layer named. The keyword
arguments make the near relatives a wrong weight file comes from."""

import keras


def build(num_classes, input_shape, stem=8, body_kernel=3, body=True):
    inputs = keras.Input(input_shape)
    x = keras.layers.Conv2D(stem, 3, padding="same", name="c1")(inputs)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    x = keras.layers.ReLU()(x)
    if body:
        x = keras.layers.Conv2D(16, body_kernel, padding="same", name="c2")(x)
        x = keras.layers.BatchNormalization(name="bn2")(x)
        x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, name="head")(x), name="net")


def mlp(num_classes, input_shape):
    """Another architecture: shares no weight with `build`."""
    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                             keras.layers.Dense(32, name="hidden"),
                             keras.layers.Dense(num_classes, name="out")])
