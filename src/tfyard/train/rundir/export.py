"""Export the trained model: SavedModel for serving, `model.keras`, and `model.h5`.

The SavedModel serves float images (`serve`) and encoded image bytes (`serving_default`,
`predict.signature`); the class names travel inside it and in `class_names.txt`.

The export is built from a fresh, strategy-free copy of the model so it never carries
mirrored or parameter-server variables, and is written as `tfyard.replace` writes a
directory: staged beside `export/`, which it replaces only when complete.
"""

from __future__ import annotations

import logging
import os

import keras
import tensorflow as tf

from tfyard import compat
from tfyard.errors import UserError, plain_op_error
from tfyard.predict.signature import serving_endpoints
from tfyard.runfiles.files import files_for
from tfyard.runfiles.layout import CLASS_NAMES, H5_MODEL, KERAS_MODEL, SAVED_MODEL

log = logging.getLogger("tfyard")


def serving_function(model, objective, input_shape):
    """`serve(inputs) -> {"probabilities", "classes"}` and its input signature, from the
    model's own input (shape and dtype) where it declares one: one input, as a model of
    several is refused before training (`task.check_one_input`). Logits get a softmax (a
    sigmoid for one output); a model that outputs probabilities (`objective.from_logits`
    false) is served as it is."""
    declared = getattr(model, "inputs", None)
    if declared:
        spec = tf.TensorSpec([None, *declared[0].shape[1:]], declared[0].dtype, name="images")
    else:
        spec = tf.TensorSpec([None, *input_shape], tf.float32, name="images")

    def serve(images):
        outputs = tf.cast(model(images, training=False), tf.float32)
        if outputs.shape[-1] == 1:   # one output: the probability of class 1
            probabilities = tf.sigmoid(outputs) if objective.from_logits else outputs
            return {"probabilities": probabilities,
                    "classes": tf.cast(probabilities[:, 0] > 0.5, tf.int64)}
        probabilities = tf.nn.softmax(outputs) if objective.from_logits else outputs
        return {"probabilities": probabilities, "classes": tf.argmax(outputs, -1)}

    return serve, spec


def export_model(model, task, objective, dtype_policy: str | None,
                 export_dir: str) -> dict[str, str]:
    """Write the three formats; returns {format: path} for those that were written."""
    plain = task.build_model(dtype_policy)   # outside the strategy: plain variables
    plain.set_weights([tf.convert_to_tensor(w) for w in model.get_weights()])
    files = files_for(export_dir)
    with files.staged_directory(export_dir) as tmp:   # the previous export/ kept until then
        files.make_directory(tmp)
        with compat.name_scopes_kept():   # a failed trace leaves none behind
            written = _write_formats(plain, task, objective, tmp)
    return {kind: os.path.join(export_dir, rel) for kind, rel in written.items()}


def _write_formats(plain, task, objective, tmp: str) -> dict[str, str]:
    """Write the SavedModel, the class names, `model.keras` and `model.h5` into `tmp`;
    returns {format: name} for those that were written."""
    written = {}
    archive = keras.export.ExportArchive()
    archive.track(plain)
    serve, spec = serving_function(plain, objective, task.input_shape)
    # the other endpoints call the traced `serve`, so the model is traced once per context
    serve = archive.add_endpoint("serve", serve, input_signature=[spec])
    for name, function, signature in serving_endpoints(serve, spec, task.class_names,
                                                       task.preprocessing):
        archive.add_endpoint(name, function, input_signature=signature)
    try:
        archive.write_out(os.path.join(tmp, SAVED_MODEL), verbose=False)
    except (ValueError, TypeError, NotImplementedError) as exc:   # e.g. a model named "_net"
        raise UserError(f"the SavedModel export failed after training: "
                        f"{plain_op_error(exc)[:160]}; "
                        "the checkpoints keep the trained weights: fix the model and rerun "
                        "with the same output dir to export, or pass --no_export") from None
    written["saved_model"] = SAVED_MODEL
    files = files_for(tmp)
    files.write_whole(os.path.join(tmp, CLASS_NAMES),   # for model.keras
                     "".join(f"{name}\n" for name in task.class_names))
    for kind, name in (("keras", KERAS_MODEL), ("h5", H5_MODEL)):
        path = os.path.join(tmp, name)
        try:   # a subclassed model without get_config, or h5's limits: serving still works
            plain.save(path)
            written[kind] = name
        except (ValueError, NotImplementedError, TypeError) as exc:
            if files.has(path):
                files.delete(path)
            log.warning(f"tfyard: {name} not written: {plain_op_error(exc)[:160]}")
    return written
