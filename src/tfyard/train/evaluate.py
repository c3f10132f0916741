"""Evaluation outside the training loop: the evaluator side-car and `tfyard evaluate`.

The side-car waits for each new checkpoint the chief writes, evaluates it on the
validation split, writes eval summaries under `<log_dir>/evaluator` and
`evaluator.jsonl`, and exits once it has seen the final step.
"""

from __future__ import annotations

import os

import tensorflow as tf

from tfyard.data import build_dataset, checked, dataset_info
from tfyard.errors import UserError
from tfyard.models import create_model, get_spec
from tfyard.train import outputs
from tfyard.train.build import dtype_policy, model_input_shape
from tfyard.train.checkpoint import restore_if_readable, restore_newest
from tfyard.train.console import Console
from tfyard.train.loop import evaluate_model
from tfyard.train.options import TrainOptions, resolve_numbers
from tfyard.train.report import Reporter


def _evaluate(options: TrainOptions, plat, model, shape, num_classes: int, batch_size: int,
              split: str = "validation") -> dict:
    dataset = build_dataset(options.dataset, split, plat.data_dir, batch_size=batch_size,
                            image_size=shape[0], dtype=options.dtype,
                            label_offset=options.label_offset, cache_dir=plat.work_dir)
    with checked(options.dataset, plat.data_dir, split, cache_dir=plat.work_dir):
        return evaluate_model(model, dataset, num_classes)


def run_sidecar(options: TrainOptions, plat, info, spec) -> dict:
    """Evaluate every new checkpoint until the one at the final step."""
    numbers = resolve_numbers(options, spec.family, 1, info.num_examples["train"])
    shape = model_input_shape(info, options.image_size)
    model = create_model(spec.name, info.num_classes, shape,
                         dtype_policy=dtype_policy(options.dtype))
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, step=step)
    reporter = Reporter(plat.output_dir, plat.log_dir, name="evaluator")
    console = Console(numbers.total_steps, numbers.steps_per_epoch)
    directory = os.path.join(plat.output_dir, outputs.CHECKPOINTS)
    last = None
    try:
        for path in tf.train.checkpoints_iterator(directory, min_interval_secs=1,
                                                  timeout=options.startup_timeout):
            if not restore_if_readable(checkpoint, path, lambda status: status.expect_partial(),
                                       "the evaluator waits for the next one"):
                continue
            last = _evaluate(options, plat, model, shape, info.num_classes,
                             numbers.per_replica_batch)
            at = int(step.numpy())
            reporter.report(at, at / numbers.steps_per_epoch, last, kind="eval")
            console.evaluation(at, last)
            if at >= numbers.total_steps:
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

    outputs.require_run(output_dir, use_export)
    run = outputs.read_run(output_dir)
    if run is None:
        raise UserError(f"{os.path.join(output_dir, outputs.RUN_FILE)} is missing or unreadable; "
                        "point --output_dir at a directory written by `tfyard train`")
    options = TrainOptions.from_dict(run)
    plat = platform_contract.resolve(data_dir or options.data_dir, output_dir,
                                     options.work_dir, None, 0, create=False)
    info = dataset_info(options.dataset, plat.data_dir, cache_dir=plat.work_dir)
    shape = model_input_shape(info, options.image_size)
    if use_export:
        import keras

        path = os.path.join(output_dir, outputs.EXPORTED_MODEL)
        if not tf.io.gfile.exists(path):
            raise UserError(f"{path} not found; the run has not exported yet (drop --export)")
        model, source = keras.models.load_model(path), path
    else:
        model = create_model(get_spec(options.model).name, info.num_classes, shape,
                             dtype_policy=dtype_policy(options.dtype))
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
        source = restore_newest(tf.train.Checkpoint(model=model, step=step),
                                os.path.join(output_dir, outputs.CHECKPOINTS),
                                lambda status: status.expect_partial())
        if source is None:
            raise UserError(f"no checkpoint in {output_dir}/{outputs.CHECKPOINTS} yet; train "
                            "first or use --export")
    metrics = _evaluate(options, plat, model, shape, info.num_classes, 64, split)
    return {"source": source, "split": split, **metrics}
