"""TF-Slim model names built as Keras applications (random weights, float32 logits)."""

from __future__ import annotations

import keras
from keras import layers


def slim_model(name, num_classes, input_shape, app):
    """`keras.applications.<App>(weights=None)` with its own top for `num_classes`; a float32
    linear `logits` layer follows, so mixed-precision models still emit float32. `app` is
    the registry's SlimApp for `name`."""
    base = getattr(keras.applications, app.app)(
        weights=None, include_top=True, classes=num_classes, classifier_activation=None,
        input_shape=input_shape, **dict(app.kwargs))
    logits = layers.Activation("linear", dtype="float32", name="float32_logits")(base.output)
    return keras.Model(base.input, logits, name=name)
