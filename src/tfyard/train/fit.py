"""`tfyard.fit(model, data, **options)`: the Python door to `tfyard train`, for the user's own
Keras model and input, at every scale `TF_CONFIG` describes (the successor of
`model_to_estimator` + `RunConfig(train_distribute=...)`).
"""

from __future__ import annotations

from dataclasses import fields

from tfyard.errors import UserError
from tfyard.train.options import TrainOptions
from tfyard.train.task import usercode


def fit(model, data="digits", *, eval_data=None, num_classes: int | None = None,
        class_names=None, **options) -> dict | None:
    """Train `model` on `data` as this process's role in TF_CONFIG says; the run summary
    (summary.json), or None on a ps or worker server of a parameter-server cluster.

    Args:
        model: a function `(num_classes=, input_shape=) -> keras.Model` (compiled or not),
            a `"module:function"` string, or a registry name.
        data: a registry dataset name, or `input_fn(input_context) -> tf.data.Dataset` of
            per-replica batches `(x, y)` or `(x, y, sample_weight)` (or its
            `"module:function"`; `input_fn()` without the context too), or such a
            `tf.data.Dataset` itself, which every replica then reads whole.
        eval_data: like `data`, for evaluation; a registry dataset evaluates its validation
            split.
        num_classes: where no dataset says it (otherwise read from the model's output).
        class_names: the name of each class id, exported with the model (default: the
            dataset's names, else the ids); a count other than the model's outputs stops
            before step 1.
        **options: the `tfyard train` options by their Python names (output_dir,
            train_steps, batch_size, seed, jit_compile, dtype, ...).
    """
    from tfyard.quiet.python_noise import drop_python_noise
    from tfyard.train.job import train
    from tfyard.train.outside.console import configure_console

    known = {f.name for f in fields(TrainOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise UserError(f"tfyard.fit: unknown option(s) {', '.join(unknown)}; the options are "
                        "those of `tfyard train --help` by their Python names")
    data, eval_data = _input(data, "data"), _input(eval_data, "eval_data")
    model_name = model if isinstance(model, str) else (
        usercode.reference_of(model) or getattr(model, "__name__", "model_fn"))
    own_data = callable(data) or usercode.is_reference(data)
    data_name = (data if isinstance(data, str) else usercode.reference_of(data)
                 or getattr(data, "__name__", "input_fn")) if own_data else data
    run_options = TrainOptions(model=model_name, dataset=data_name, **options)
    configure_console(run_options.quiet)
    drop_python_noise()
    return train(run_options, model=model, data=data if own_data else None,
                 eval_data=eval_data, num_classes=num_classes, class_names=class_names)


def _input(data, what: str):
    """`data` as the task takes it: a name or reference, a function, or (wrapped in one) a
    `tf.data.Dataset` handed over itself, which every replica then reads whole: several
    workers need an input_fn that shards by its context."""
    if data is None or isinstance(data, str) or callable(data):
        return data
    import tensorflow as tf

    if isinstance(data, tf.data.Dataset):
        def dataset(context=None):
            return data
        return dataset
    raise UserError(f"tfyard.fit: {what} is a {type(data).__name__}; give a registry dataset "
                    "name, an input_fn(input_context) -> tf.data.Dataset, or a tf.data.Dataset "
                    "of (x, y) batches (for arrays: tf.data.Dataset.from_tensor_slices((x, y))"
                    ".batch(32))")
