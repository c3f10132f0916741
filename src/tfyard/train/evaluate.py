"""Evaluation outside the training loop: the evaluator side-car and `tfyard evaluate`.

The side-car waits for each new checkpoint the chief writes, evaluates it on the
validation split, writes eval summaries under `<log_dir>/evaluator` and
`evaluator.jsonl`, and exits once it has seen the final step.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from tfyard.data import build_dataset, checked, dataset_info
from tfyard.errors import UserError
from tfyard.models import create_model
from tfyard.train.loop import evaluate_model
from tfyard.train.options import resolve_numbers
from tfyard.train.report import Reporter

RUN_FILE = "run.json"


def _policy(dtype: str) -> str | None:
    return None if dtype == "float32" else f"mixed_{dtype}"


def _eval_dataset(options, plat, shape, batch_size: int, split: str = "validation"):
    return build_dataset(options["dataset"], split, plat.data_dir, batch_size=batch_size,
                         image_size=shape[0], dtype=options.get("dtype", "float32"),
                         label_offset=options.get("label_offset"),
                         cache_dir=plat.work_dir)


def run_sidecar(options, plat, info, spec) -> dict:
    """Evaluate every new checkpoint until the one at the final step."""
    from tfyard.train.job import model_input_shape

    numbers = resolve_numbers(options, spec.family, 1, info.num_examples["train"])
    shape = model_input_shape(info, options.image_size)
    model = create_model(spec.name, info.num_classes, shape, dtype_policy=_policy(options.dtype))
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, step=step)
    reporter = Reporter(plat.output_dir, plat.log_dir, True, options.quiet,
                        numbers.total_steps, numbers.steps_per_epoch, name="evaluator")
    directory = os.path.join(plat.output_dir, "checkpoints")
    last = None
    settings = {"dataset": options.dataset, "dtype": options.dtype,
                "label_offset": options.label_offset}
    try:
        for path in tf.train.checkpoints_iterator(directory, min_interval_secs=1,
                                                  timeout=options.startup_timeout):
            checkpoint.restore(path).expect_partial()
            dataset = _eval_dataset(settings, plat, shape, numbers.per_replica_batch)
            with checked(options.dataset, plat.data_dir, "validation", cache_dir=plat.work_dir):
                last = evaluate_model(model, dataset, info.num_classes)
            reporter.report(int(step.numpy()), last, kind="eval")
            if int(step.numpy()) >= numbers.total_steps:
                break
        else:
            raise UserError(
                f"evaluator: no new checkpoint in {directory} for {options.startup_timeout:.0f}s; "
                "is the chief running? (raise --startup_timeout to wait longer)")
    finally:
        reporter.close()
    return {"role": "evaluator", "final_step": int(step.numpy()), "eval": last}


def evaluate_output(output_dir: str, split: str = "validation", use_export: bool = False,
                    data_dir: str | None = None) -> dict:
    """`tfyard evaluate`: the latest checkpoint (or the export) of a finished or running run."""
    from tfyard import platform as platform_contract
    from tfyard.train.job import model_input_shape

    run_file = os.path.join(output_dir, RUN_FILE)
    if not tf.io.gfile.exists(run_file):
        raise UserError(f"{run_file} not found; point --output_dir at a directory written by "
                        "`tfyard train`")
    with tf.io.gfile.GFile(run_file) as handle:
        options = json.load(handle)
    plat = platform_contract.resolve(data_dir or options.get("data_dir"), output_dir,
                                     options.get("work_dir"), None, 0, create=False)
    info = dataset_info(options["dataset"], plat.data_dir, cache_dir=plat.work_dir)
    shape = model_input_shape(info, options.get("image_size"))
    if use_export:
        import keras

        path = os.path.join(output_dir, "export", "model.keras")
        if not tf.io.gfile.exists(path):
            raise UserError(f"{path} not found; the run has not exported yet (drop --export)")
        model, source = keras.models.load_model(path), path
    else:
        model = create_model(options["model"], info.num_classes, shape,
                             dtype_policy=_policy(options.get("dtype", "float32")))
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
        source = tf.train.latest_checkpoint(os.path.join(output_dir, "checkpoints"))
        if source is None:
            raise UserError(f"no checkpoint in {output_dir}/checkpoints yet; train first or "
                            "use --export")
        tf.train.Checkpoint(model=model, step=step).restore(source).expect_partial()
    dataset = _eval_dataset(options, plat, shape, 64, split)
    with checked(options["dataset"], plat.data_dir, split, cache_dir=plat.work_dir):
        metrics = evaluate_model(model, dataset, info.num_classes)
    return {"source": source, "split": split, **metrics}
