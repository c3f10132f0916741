"""Keras models as a user writes them, none from tfyard's registry: the tests hand them to
`tfyard train --model tests/user_code/models.py:NAME` and `tfyard.fit`."""

import keras


def mobilenet(num_classes, input_shape):
    """A Keras Applications model, untrained, at a small input."""
    return keras.applications.MobileNetV3Small(
        input_shape=input_shape, weights=None, classes=num_classes, minimalistic=True,
        include_preprocessing=False, include_top=True, classifier_activation=None)


def convnet(num_classes, input_shape, l2=1e-3):
    """A functional convnet with a kernel regularizer and Dropout, outputting logits."""
    inputs = keras.Input(input_shape)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu",
                            kernel_regularizer=keras.regularizers.L2(l2))(inputs)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dropout(0.2)(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x))


def compiled(input_shape):
    """The TensorFlow beginner tutorial's model, compiled as the tutorial compiles it."""
    model = keras.Sequential([
        keras.Input(input_shape), keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"), keras.layers.Dropout(0.2),
        keras.layers.Dense(10)])
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def not_a_model():
    return "a string"


def three_outputs():
    return keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten(),
                             keras.layers.Dense(3)])


def one_hot_loss(num_classes, input_shape):
    """Compiled for one-hot labels, which a registry dataset's class ids are not."""
    model = keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                              keras.layers.Dense(num_classes)])
    model.compile(loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    return model
