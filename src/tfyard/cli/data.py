"""`tfyard data`: convert datasets to TFRecords, inspect them, prepare the digits demo."""

from __future__ import annotations

import json


def register(commands) -> None:
    data = commands.add_parser("data", help="convert, inspect and prepare datasets")
    sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND",
                              parser_class=type(data))
    convert = sub.add_parser("convert", help="write ImageNet-style TFRecord shards + labels.txt")
    convert.add_argument("source_format", choices=("imagefolder", "cifar10", "mnist", "folder"),
                         help="imagefolder (alias folder), cifar10 or mnist: the names "
                         "`train --dataset` uses")
    convert.add_argument("src", help="the input directory")
    convert.add_argument("dst", help="the output directory (read it back with --dataset "
                         "imagenet)")
    convert.add_argument("--shards", type=int, default=8, help="training shards (default 8; "
                         "validation gets shards/8, at least 1)")
    convert.add_argument("--validation_fraction", "--validation-fraction", type=float,
                         default=None, help="imagefolder without a validation/ folder: share "
                         "of each class held out (default 0.1, as training holds out)")
    convert.add_argument("--overwrite", action="store_true",
                         help="replace the set DST holds, whole, once the new one is written")
    convert.add_argument("--workers", type=int, default=None,
                         help="writer processes (default: the CPU count, but one per "
                         "1,000 images at most: a writer process starts TensorFlow, "
                         "seconds of CPU; a small set is written in this one)")
    convert.set_defaults(func=run_convert)
    inspect = sub.add_parser("inspect", help="format, counts, classes and image sizes of PATH")
    inspect.add_argument("path")
    inspect.add_argument("--verify", action="store_true",
                         help="decode every record and report the bad ones")
    inspect.add_argument("--json", action="store_true", help="print one JSON object")
    inspect.set_defaults(func=run_inspect)
    prepare = sub.add_parser("prepare", help="write the bundled digits dataset to the cache")
    prepare.add_argument("dataset", choices=("digits",))
    prepare.add_argument("--cache_dir", "--cache-dir", default=None,
                         help="where to write it (default ~/.cache/tfyard)")
    prepare.set_defaults(func=run_prepare)
    data.set_defaults(func=lambda args: data.print_help() or 2)


def run_convert(args) -> int:
    """Checks first, then the new set written beside DST and put in its place whole: a failed
    or killed convert leaves DST as it was. Into a bucket, the set is written to a local
    folder first and uploaded once complete."""
    from tfyard import quiet
    from tfyard.data.convert import check_destination
    from tfyard.replace import check_writable, replacing_directory
    from tfyard.storage import in_bucket, readable_dir

    args.src = readable_dir(args.src, None, "source")
    if in_bucket(args.dst, "destination"):
        counts = _convert_into_bucket(args)
    else:
        check_destination(args.src, args.dst, args.overwrite)
        check_writable(args.dst, "the destination", "directory")
        quiet.install()  # now: the writer processes inherit the filtered stderr
        with replacing_directory(args.dst) as staging:
            counts = _converted(args, staging)
    print(", ".join(f"{split}: {n} records" for split, n in counts.items()) + f" -> {args.dst}")
    print(f"train on it with: tfyard train --dataset imagenet --data_dir {args.dst}")
    return 0


def _converted(args, target: str) -> dict:
    """Write the set of `args.src` into the folder `target`; the records of each split."""
    from tfyard.data.convert import CONVERTERS
    from tfyard.data.formats import canonical

    source_format = canonical(args.source_format)
    options = ({"validation_fraction": args.validation_fraction}
               if source_format == "imagefolder" else {})
    return CONVERTERS[source_format](args.src, target, shards=args.shards,
                                     workers=args.workers, **options)


def _convert_into_bucket(args) -> dict:
    """Convert into a local folder, then upload it to the prefix `args.dst` (its previous
    set, with --overwrite, replaced once the new one is there; `storage.local_output`)."""
    from tfyard import quiet
    from tfyard.data.convert import check_held
    from tfyard.storage import local_output, location, mirror

    check_held(args.dst, mirror.top_names(location(args.dst, "destination"), "destination"),
               args.overwrite)
    quiet.install()
    with local_output(args.dst, "destination") as staging:
        return _converted(args, staging)


def run_inspect(args) -> int:
    from tfyard.data.inspect import inspect

    report = inspect(args.path, verify=args.verify)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"format:  {report['format']}")
        for split, facts in report["splits"].items():
            print(f"{split}: {facts['records']} records, {facts['classes']} classes, sizes "
                  f"{facts['min_size']}..{facts['max_size']}, {facts['problems']} problems")
        for problem in report["problems"]:
            print(f"  {problem}")
    return 1 if report["problems"] else 0


def run_prepare(args) -> int:
    from tfyard.data.formats.digits import materialise

    print(materialise(args.cache_dir))
    return 0
