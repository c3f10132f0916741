"""`tfyard predict`: a trained model's classes for image files, as a csv, jsonl or parquet
table."""

from __future__ import annotations

import sys

from tfyard import platform

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
        help="the run directory (a copy of its export/ or a SavedModel works too)")
    predict.add_argument("inputs", nargs="+", metavar="INPUT",
                         help="image files, folders (recursive) or glob patterns ('**' too)")
    predict.add_argument("--top_k", "--top-k", type=int, default=5,
                         help="how many classes each row lists (default 5)")
    predict.add_argument("--output", metavar="FILE",
                         help="write the table to FILE (default: standard output)")
    predict.add_argument("--format", choices=("csv", "jsonl", "parquet"), default=None,
                         help="table format (default: by FILE's extension, else csv; parquet "
                         "needs pyarrow and --output)")
    predict.add_argument("--batch_size", "--batch-size", type=int, default=32,
                         help="images per model call (default 32)")
    predict.add_argument("--on_error", "--on-error", choices=("skip", "fail"), default="skip",
                         help="an unreadable image: a row with its error (skip, default), or "
                         "stop with no output (fail)")
    predict.set_defaults(func=_predict)


def _predict(args) -> int:
    from tfyard.predict.local import predict_files

    outcome = predict_files(args.output_dir, args.inputs, args.output, args.format,
                            args.top_k, args.batch_size, args.on_error)
    print(outcome.line(args.output), file=sys.stderr)
    return 0
