"""The two MNIST models of the Keras examples, ending in float32 logits."""

from __future__ import annotations

import keras
from keras import layers


def mnist_cnn(num_classes, input_shape, name="mnist_cnn"):
    """keras.io "Simple MNIST convnet": two conv/pool pairs, dropout, one dense layer."""
    images = keras.Input(shape=input_shape, name="images")
    x = layers.Conv2D(32, 3, activation="relu", name="conv1")(images)
    x = layers.MaxPooling2D(2, name="pool1")(x)
    x = layers.Conv2D(64, 3, activation="relu", name="conv2")(x)
    x = layers.MaxPooling2D(2, name="pool2")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dropout(0.5, name="dropout")(x)
    logits = layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(images, logits, name=name)


def mnist_mlp(num_classes, input_shape, name="mnist_mlp"):
    """Keras mnist_mlp example: two hidden layers of 512 ReLU units with dropout 0.2."""
    images = keras.Input(shape=input_shape, name="images")
    x = layers.Flatten(name="flatten")(images)
    for i in (1, 2):
        x = layers.Dense(512, activation="relu", name=f"dense{i}")(x)
        x = layers.Dropout(0.2, name=f"dropout{i}")(x)
    logits = layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return keras.Model(images, logits, name=name)
