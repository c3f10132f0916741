"""`tfyard data inspect`: which format a directory holds, its counts, sizes and problems.

The same scan names the bad record when training fails on one (`tfyard.data.checked`).
"""

from __future__ import annotations

import glob
import os

from tfyard.data.formats import reader
from tfyard.errors import UserError
from tfyard.storage import readable_dir

# (dataset, file patterns that identify it), first match wins
_SIGNS = (
    ("imagenet", ("train-?????-of-?????", "validation-?????-of-?????")),
    ("tfrecord", ("*.tfrecord",)),
    ("cifar10", ("data_batch_1.bin", "test_batch.bin", "cifar-10-batches-bin")),
    ("cifar100", ("train.bin", "test.bin", "cifar-100-binary")),
    ("mnist", ("mnist.npz", "train-images-idx3-ubyte.gz")),
)
MAX_LISTED = 20


def detect(path: str) -> str:
    """The dataset name whose on-disk layout `path` holds."""
    if not os.path.isdir(path):
        raise UserError(f"{path} is not a directory; pass the folder that holds the data")
    for name, patterns in _SIGNS:
        if any(glob.glob(os.path.join(glob.escape(path), p)) for p in patterns):
            return name
    if any(e.is_dir() for e in os.scandir(path)):
        return "imagefolder"
    raise UserError(f"cannot tell the format of {path}: expected TFRecord shards, CIFAR .bin "
                    "batches, mnist.npz / IDX .gz files or class sub-folders of images")


def inspect(path: str, verify: bool = False, name: str | None = None) -> dict:
    """Counts, classes, image sizes and (with `verify`, a full decode) problems per split.
    A `path` in a bucket is read from its copy on local disk."""
    report = {"path": path}
    path = readable_dir(path, None, "PATH")
    name = name or detect(path)
    report.update({"format": name, "splits": {}, "problems": []})
    errors = []
    for split in ("train", "validation"):
        try:
            records = list(reader(name).scan(name, path, split, decode=verify))
        except UserError as exc:
            errors.append(str(exc))
            continue
        sizes = [r.size for r in records if r.size]
        bad = [r for r in records if r.problem]
        report["splits"][split] = {
            "records": len(records),
            "classes": len({r.label for r in records if r.label is not None and not r.problem}),
            "min_size": [min(s[0] for s in sizes), min(s[1] for s in sizes)] if sizes else None,
            "max_size": [max(s[0] for s in sizes), max(s[1] for s in sizes)] if sizes else None,
            "problems": len(bad),
        }
        report["problems"] += [str(r) for r in bad[:MAX_LISTED]]
    if not report["splits"]:
        raise UserError(errors[0])
    return report


def problems(name: str, data_dir: str | None, split: str, cache_dir: str | None = None):
    """The unusable records of a split (full decode), in order."""
    records = reader(name).scan(name, readable_dir(data_dir, cache_dir), split, decode=True,
                                cache_dir=cache_dir)
    return (r for r in records if r.problem)


def first_problem(name: str, data_dir: str | None, split: str, cache_dir: str | None = None):
    """The first unusable record of a split, or None if all are fine."""
    return next(problems(name, data_dir, split, cache_dir), None)
