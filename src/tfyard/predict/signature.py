"""The SavedModel's extra signatures: images as encoded bytes, and what predicting needs.

`serving_default` takes a batch of encoded images (`tf.string [None]`, what TF Serving's REST
API passes for `{"instances": [{"b64": ...}]}`), prepares each one exactly as evaluation does
(`data.preprocess.eval_image`) and returns `probabilities`, `class_id` and `class_name`, so a
client sends files, not tensors it must prepare the way tfyard does. `metadata` returns the
class names, the preprocessing and the input dtype as constants: `tfyard predict` reads them
from the graph, so a SavedModel copied anywhere predicts without its run directory.
"""

from __future__ import annotations

import json

import tensorflow as tf

from tfyard.data.preprocess import Preprocessing, eval_image

BYTES_ENDPOINT = "serving_default"
METADATA_ENDPOINT = "metadata"


def class_probabilities(probabilities):
    """[batch, classes] from `serve`'s probabilities: a single sigmoid output is the
    probability of class 1 of two."""
    if probabilities.shape[-1] == 1:
        return tf.concat([1.0 - probabilities, probabilities], axis=-1)
    return probabilities


def serving_endpoints(serve, spec: tf.TensorSpec, class_names, view: Preprocessing | None):
    """(name, function, input signature) of each endpoint beside `serve(images)`: the image
    bytes one where the run's preprocessing is known (not for a user's own input), and
    `metadata`."""
    names = tf.constant(list(class_names))
    preprocessing = json.dumps(view.to_dict()) if view else ""

    def metadata():
        return {"class_names": names, "preprocessing": tf.constant(preprocessing),
                "input_dtype": tf.constant(spec.dtype.name)}

    endpoints = [(METADATA_ENDPOINT, metadata, [])]
    if view is None:
        return endpoints

    def classify(image_bytes):
        images = tf.map_fn(lambda encoded: eval_image(encoded, view, spec.dtype), image_bytes,
                           fn_output_signature=tf.TensorSpec(spec.shape[1:], spec.dtype))
        probabilities = class_probabilities(serve(images)["probabilities"])
        ids = tf.argmax(probabilities, -1)
        return {"probabilities": probabilities, "class_id": ids,
                "class_name": tf.gather(names, ids)}

    return [(BYTES_ENDPOINT, classify, [tf.TensorSpec([None], tf.string, name="image_bytes")]),
            *endpoints]
