"""Evaluation outside the training loop: the evaluator side-car and `tfyard evaluate`.

The side-car waits for each new checkpoint the chief writes, evaluates it on the
validation split, writes eval summaries under `<log_dir>/evaluator` and
`evaluator.jsonl`, and exits once it has seen the final step.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from tfyard.data.pipeline import split_name
from tfyard.errors import UserError
from tfyard.runfiles.layout import RunDirectory
from tfyard.train.build import dtype_policy
from tfyard.train.loop.evaluation import model_evaluation
from tfyard.train.options import TrainOptions
from tfyard.train.outside.console import Console
from tfyard.train.rundir.checkpoint import restore_if_readable, restore_newest
from tfyard.train.rundir.directory import read_run, require_run
from tfyard.train.rundir.report import Reporter


def _evaluation(task, model, objective, batch_size: int,
                split: str = "validation") -> Callable[[], dict]:
    """`evaluate()`: the objective's figures of `model` on `split`, its step traced once
    however often it is called (the side-car evaluates every checkpoint)."""
    if not task.data.has_eval:
        raise UserError(f"{task.data.name} has no evaluation input; give eval_data")
    measure = model_evaluation(model, objective)

    def evaluate() -> dict:
        with task.data.checked(split):
            return measure(lambda context: task.data.evaluation(context, batch_size, split))

    return evaluate


def _chief_numbers(output_dir: str) -> dict:
    """The total steps, steps per epoch and batch the chief resolved, from its run.json."""
    record = read_run(output_dir) or {}
    if "total_steps" not in record:
        raise UserError(f"{RunDirectory(output_dir).run_file} lacks the run's numbers; "
                        "it was written by an older tfyard: rerun the chief first")
    return record


def run_sidecar(options: TrainOptions, plat, task) -> dict:
    """Evaluate every new checkpoint until the one at the chief's final step."""
    model = task.build_model(dtype_policy(options.dtype))
    objective = task.objective(model, options.label_smoothing)
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, step=step)
    reporter = Reporter(plat.output_dir, plat.log_dir, name="evaluator")
    directory = RunDirectory(plat.output_dir).checkpoints
    last, numbers, console, evaluate = None, None, None, None
    try:
        for path in tf.train.checkpoints_iterator(directory, min_interval_secs=1,
                                                  timeout=options.startup_timeout):
            if not restore_if_readable(checkpoint, path, lambda status: status.expect_partial(),
                                       "the evaluator waits for the next one"):
                continue
            if numbers is None:   # the chief writes run.json before its first checkpoint
                numbers = _chief_numbers(plat.output_dir)
                console = Console(numbers["total_steps"], numbers["steps_per_epoch"])
                evaluate = _evaluation(task, model, objective,
                                       numbers["per_replica_batch"] or 64)
            last = evaluate()
            at = int(step.numpy())
            reporter.report(at, at / numbers["steps_per_epoch"], last, kind="eval")
            console.evaluation(at, last)
            if at >= numbers["total_steps"]:
                break
        else:
            raise UserError(
                f"evaluator: no new checkpoint in {directory} for {options.startup_timeout:.0f}s; "
                "is the chief running? (raise --startup_timeout to wait longer)")
    finally:
        reporter.close()
    return {"role": "evaluator", "final_step": int(step.numpy()), "eval": last}


def _require_importable_input(dataset: str) -> None:
    """A run trained on a Python input (a function or Dataset handed to `tfyard.fit`, not
    `MODULE:FUNCTION`) cannot be rebuilt here: say so instead of "unknown dataset"."""
    from tfyard.data.formats import DATASETS, canonical
    from tfyard.train.task import usercode

    if canonical(dataset) not in DATASETS and not usercode.is_reference(dataset):
        raise UserError(f"this run trained on {dataset!r}, an input handed to tfyard.fit "
                        "that `tfyard evaluate` cannot import; pass data (and eval_data) to "
                        "tfyard.fit as \"module:function\" to evaluate it here, or read the "
                        "run's own evaluation in summary.json")


def _require_matching_data(data, record: dict, split: str) -> None:
    """The data must hold the run's classes (the count, and the names where the format
    names them) and some examples of `split`: checked before the model is built, since a
    mismatch otherwise ends in a restore traceback or, worse, a number about other classes."""
    info = getattr(data, "info", None)   # a registry dataset's facts; a user's input has none
    if info is None:
        return
    where = data.plat.data_dir or data.name
    trained = record.get("num_classes")
    if trained is not None and info.num_classes != trained:
        raise UserError(f"{where} holds {info.num_classes} classes but the run was trained on "
                        f"{trained}; point --data_dir at the data the run trained on")
    names = record.get("class_names")
    if info.class_names is not None and names is not None and list(info.class_names) != names:
        differ = next(i for i, (a, b) in enumerate(zip(info.class_names, names, strict=True))
                      if a != b)
        raise UserError(f"{where} names its classes otherwise than the run: class {differ} is "
                        f"{info.class_names[differ]!r} there, {names[differ]!r} in the run; "
                        "point --data_dir at the data the run trained on")
    if not info.num_examples.get(split_name(split)):
        raise UserError(f"the {split} split of {where} holds no examples; evaluate another "
                        "--split, or add data")


def evaluate_output(output_dir: str, split: str = "validation", use_export: bool = False,
                    data_dir: str | None = None) -> dict:
    """`tfyard evaluate`: the latest checkpoint (or the export) of a finished or running run."""
    from tfyard import platform as platform_contract
    from tfyard.train.task.task import make_task

    require_run(output_dir, use_export)
    run, record = RunDirectory(output_dir), read_run(output_dir)
    if record is None:
        raise UserError(f"{run.run_file} is unreadable; point "
                        "--output_dir at a directory written by `tfyard train`")
    options = TrainOptions.from_dict(record)
    _require_importable_input(options.dataset)
    plat = platform_contract.resolve(data_dir or options.data_dir, output_dir,
                                     options.work_dir, None, 0, create=False)
    task = make_task(options, plat, eval_data=record.get("eval_data"),
                     num_classes=record.get("num_classes"))
    _require_matching_data(task.data, record, split)
    model = task.build_model(dtype_policy(options.dtype))
    objective = task.objective(model, options.label_smoothing)
    if use_export:
        import keras

        path = run.exported_model
        model.set_weights(keras.models.load_model(path, compile=False).get_weights())
        source = path
    else:
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
        source = restore_newest(tf.train.Checkpoint(model=model, step=step),
                                run.checkpoints,
                                lambda status: status.expect_partial())
    metrics = _evaluation(task, model, objective, 64, split)()
    return {"source": source, "split": split, **metrics}
