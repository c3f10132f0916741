"""`tfyard predict`: a trained model's classes for image files, as a csv, jsonl or parquet
table."""

from __future__ import annotations

import sys

from tfyard import platform
from tfyard.errors import UserError
from tfyard.predict.options import add_flags, from_args
from tfyard.predict.writers import FORMATS

DESCRIPTION = (
    "Predict the class of every image in INPUT (files, folders searched recursively, glob "
    "patterns; JPEG, PNG, BMP, GIF) with the model a run exported. Images are prepared exactly "
    "as the run's evaluation prepares them, so predicting the validation images gives "
    "`tfyard evaluate`'s top-1. Only the SavedModel's graph is read: no code the run names is "
    "imported. One row per file: path, class_id, class_name, score, the top-k ids, names and "
    "scores, and error (empty when the file was read). The table goes to standard output "
    "unless --output names a file, which appears only when complete; a final line on stderr "
    "counts the files predicted and those that could not be read.")


def register(commands) -> None:
    predict = commands.add_parser(
        "predict", help="predict the classes of image files with a trained model",
        description=DESCRIPTION)
    platform.add_platform_flag(
        predict, "output_dir", required=True, metavar="RUN",
        help="the run directory (a copy of its export/ or a SavedModel works too), or its "
        "s3:// or gs://BUCKET/PREFIX; a `tfyard tune` study: its best trial's run")
    predict.add_argument("inputs", nargs="+", metavar="INPUT",
                         help="image files, folders (recursive) or glob patterns ('**' too), or "
                         "s3:// or gs://BUCKET/PREFIX (its images)")
    predict.add_argument("--output", metavar="FILE",
                         help="write the table to FILE, or to s3:// or gs://BUCKET/KEY "
                         "(uploaded once whole) (default: standard output)")
    predict.add_argument("--format", choices=FORMATS, default=None,
                         help="table format (default: by FILE's extension, else csv; parquet "
                         "needs pyarrow and --output)")
    scale = predict.add_argument_group(
        "at scale", "--on spark|ray: INPUT is listed here, as for local predict, and the "
        "engine's workers read and score it (the model loaded once each; RUN and INPUT must "
        "be readable on every worker) into --output DIR, part files (parquet by default) that "
        "replace DIR whole when all are written")
    scale.add_argument("--on", choices=("local", "spark", "ray"), default="local",
                       help="where to predict (default: this process)")
    scale.add_argument("--master", help="--on spark: the Spark master URL (default: a local "
                       "Spark, local[WORKERS], started and stopped)")
    scale.add_argument("--address", help="--on ray: the Ray cluster HEAD:PORT (default: "
                       "RAY_ADDRESS, a Ray started on this machine, else a new local one)")
    add_flags(predict, scale)
    predict.set_defaults(func=_predict)


def _predict(args) -> int:
    from tfyard.storage import local_output

    options = from_args(args)
    with local_output(args.output, "--output") as output:   # a bucket's: uploaded at the end
        if args.on == "local":
            from tfyard.predict.local import predict_files

            for flag in ("master", "address", "workers"):
                if getattr(args, flag) is not None:
                    raise UserError(f"--{flag} needs --on spark or --on ray")
            outcome = predict_files(args.output_dir, args.inputs, output, args.format, options)
        else:
            outcome = _predict_at_scale(args, options, output)
    print(outcome.line(args.output), file=sys.stderr)
    return 0


def _predict_at_scale(args, options, output):
    from tfyard import quiet
    from tfyard.predict import scale

    other = "address" if args.on == "spark" else "master"
    if getattr(args, other) is not None:
        raise UserError(f"--{other} is for --on {'ray' if other == 'address' else 'spark'}")
    plan = scale.plan(args.output_dir, args.inputs, output, args.format, options)
    quiet.install()  # now: the local engine's workers inherit the filtered stderr
    if args.on == "ray":
        from tfyard.launch.ray import ray_session

        with ray_session(args.address):
            return scale.on_ray(plan)
    from tfyard.launch.spark import spark_context

    master = args.master or f"local[{args.workers or '*'}]"
    conf = ["spark.ui.showConsoleProgress=false"]   # predict's own bar shows instead
    if args.master and args.workers:
        conf.append(f"spark.executor.instances={args.workers}")
    with spark_context(master, conf, "tfyard predict") as sc:
        sc.setLogLevel("OFF")   # a failed task is raised here; its log lines would repeat it
        return scale.on_spark(sc, plan)
