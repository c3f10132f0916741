"""`tfyard train`, `tfyard evaluate`, `tfyard demo`, `tfyard plot` and `tfyard track`."""

from __future__ import annotations

import json

from tfyard import platform
from tfyard.flags import OUTPUT_FLAG
from tfyard.train.options import (
    TrainOptions,
    add_option_arguments,
    add_train_arguments,
    options_from_args,
)

DEMO_EPOCHS = 10
RUN_DIR = ("a directory written by `tfyard train`, or its s3:// or gs://BUCKET/PREFIX (read "
           "through a copy under ~/.cache/tfyard)")


def register(commands) -> None:
    train = commands.add_parser(
        "train", help="train an image classifier on this machine or as a cluster member",
        description="Train a model from `tfyard models` on a dataset from the data registry. "
        "The strategy follows TF_CONFIG and the GPUs (see `tfyard cluster show`); a rerun "
        "with the same --output_dir resumes from the latest checkpoint.")
    add_train_arguments(train)
    train.set_defaults(func=_train)

    evaluate = commands.add_parser(
        "evaluate", help="evaluate the latest checkpoint (or the export) of a run")
    platform.add_platform_flag(evaluate, "output_dir", required=True,
                               help=f"{RUN_DIR}; a `tfyard tune` study: its best trial's run")
    evaluate.add_argument("--split", default="validation", choices=("train", "validation"))
    evaluate.add_argument("--export", action="store_true",
                          help="evaluate export/model.keras instead of the latest checkpoint")
    platform.add_platform_flag(evaluate, "data_dir",
                               help="read the data from here instead of the run's --data_dir")
    add_option_arguments(evaluate, ["mlflow_uri"], grouped=False, helps={
        "mlflow_uri": "also log the figures to the run's MLflow run, as evaluate_SPLIT_NAME at "
        "the step evaluated (env MLFLOW_TRACKING_URI; the flag wins)"})
    # stdout is the figures' JSON: notes (a held-out split, say) would break its readers
    evaluate.set_defaults(func=_evaluate, quiet=True)

    demo = commands.add_parser(
        "demo", help="train a small ResNet on the bundled handwritten digits, end to end")
    platform.add_platform_flag(demo, "output_dir", default="output/demo",
                               help="where the demo writes (default: output/demo)")
    add_option_arguments(demo, ["epochs"], defaults={"epochs": DEMO_EPOCHS}, grouped=False)
    demo.set_defaults(func=_demo)

    plot = commands.add_parser("plot", help="draw loss, accuracy and images/sec curves")
    platform.add_platform_flag(plot, "output_dir", required=True, help=RUN_DIR)
    plot.set_defaults(func=_plot)

    track = commands.add_parser(
        "track", help="log a run directory into MLflow (one trained before tracking was on)",
        description="Log a run into MLflow after the fact: run.json's settings as params, "
        "every report of metrics.jsonl, run.json, summary.json, curves.png and the export as "
        "a model. A run tracked before continues its MLflow run with what it lacks (what a "
        "tracking server that was down did not take), so running it twice sends nothing "
        "twice.")
    platform.add_platform_flag(track, "output_dir", required=True, help=RUN_DIR)
    add_option_arguments(track, ["mlflow_uri", "experiment", "run_name", "register_model"],
                         grouped=False, helps={"mlflow_uri": "the MLflow tracking server (env "
                                               "MLFLOW_TRACKING_URI; the flag wins)"})
    track.set_defaults(func=_track)


def _train(args) -> int:
    from tfyard.train.job import train

    train(options_from_args(args))
    return 0


def _evaluate(args) -> int:
    from tfyard.runfiles.study import run_named
    from tfyard.storage import copy_url, readable_dir
    from tfyard.train.rundir.directory import require_run

    output_dir = run_named(args.output_dir)   # a study: its best trial's run
    run = readable_dir(output_dir, None, OUTPUT_FLAG)   # a bucket's: its local copy
    require_run(run, args.export)  # before TensorFlow loads: a wrong dir is instant
    from tfyard.train.evaluate import evaluate_output

    result = evaluate_output(run, args.split, args.export, args.data_dir)
    if run != output_dir:   # what was evaluated, named where it lives
        result["source"] = copy_url(result["source"], run, output_dir)
    print(json.dumps(result, indent=2))
    from tfyard import tracking

    settings = tracking.settings(args.mlflow_uri)
    if settings is not None:
        from tfyard.train.outside.tracked import log_evaluation

        log_evaluation(settings, run, output_dir, result)
        _put_back_run_file(run, output_dir)
    return 0


def _put_back_run_file(run: str, output_dir: str) -> None:
    """run.json, which now names the MLflow run, back in the bucket a run was copied from."""
    if run != output_dir:
        from tfyard.runfiles.layout import RUN_FILE
        from tfyard.train.rundir.bucket import put_back

        put_back(run, output_dir, RUN_FILE, leased=True)


def demo_options(output_dir: str, epochs: float = DEMO_EPOCHS) -> TrainOptions:
    """The demo's run (also what benchmarks/bf16_accuracy.py trains in both dtypes)."""
    return TrainOptions(
        model="cifar_resnet20", dataset="digits", image_size=16, output_dir=output_dir,
        batch_size=64, learning_rate=0.1, epochs=epochs, lr_schedule="cosine",
        warmup_epochs=1, weight_decay=5e-4, eval_every_epochs=5, seed=1, num_gpus="0")


def _demo(args) -> int:
    from tfyard.train.job import train

    summary = train(demo_options(args.output_dir, args.epochs))
    top1 = summary["eval"]["top1"]
    rate = summary["mean_images_per_sec"]
    print(f"\ndemo: validation accuracy {top1:.2%} after {summary['epochs']:.0f} epochs, "
          + (f"{rate:.0f} images/sec on this machine" if rate else
             "trained before (a new --output_dir trains again)"))
    print(f"demo: checkpoints, logs, metrics.jsonl, summary.json and export/ are in "
          f"{args.output_dir}")
    print(f"demo: try `tfyard evaluate --output_dir {args.output_dir} --export` or "
          f"`tfyard plot --output_dir {args.output_dir}`")
    return 0


def _plot(args) -> int:
    from tfyard.runfiles.layout import CURVES, RunDirectory
    from tfyard.storage import readable_dir
    from tfyard.train.rundir.bucket import put_back
    from tfyard.train.rundir.plot import plot_run

    run = readable_dir(args.output_dir, None, OUTPUT_FLAG)   # a bucket's: its local copy
    written = plot_run(run)
    if run == args.output_dir:
        print(f"wrote {written}")
        return 0
    url = put_back(run, args.output_dir, CURVES)
    print(f"wrote {url} (and {written}); TensorBoard reads the copy: tensorboard --logdir "
          f"{RunDirectory(run).logs}")
    return 0


def _track(args) -> int:
    from tfyard import tracking
    from tfyard.errors import UserError
    from tfyard.runfiles.layout import RUN_FILE, RunDirectory
    from tfyard.storage import readable_dir
    from tfyard.train.outside.tracked import backfill

    settings = tracking.settings(args.mlflow_uri, args.experiment, args.run_name,
                                 register_model=args.register_model)
    if settings is None:
        raise UserError(f"no tracking server: give --mlflow_uri or set {tracking.URI_ENV}")
    run = readable_dir(args.output_dir, None, OUTPUT_FLAG)   # a bucket's: its local copy
    layout = RunDirectory(run)
    if not layout.files.has(layout.run_file):
        raise UserError(f"{args.output_dir} holds no {RUN_FILE}; point --output_dir at a "
                        "directory written by `tfyard train`")
    print(backfill(settings, run, args.output_dir))
    _put_back_run_file(run, args.output_dir)
    return 0
