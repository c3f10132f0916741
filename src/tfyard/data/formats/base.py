"""What every reader shares: the facts it reports and the checks it makes on a data dir.

A leaf module: the readers import it, it imports no reader and not the registry.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from dataclasses import asdict, dataclass, replace

from tfyard.errors import UserError
from tfyard.storage import stream

# Per-channel statistics on the 0..255 scale, so normalised images are ~N(0, 1).
IMAGENET_STATS = ((123.68, 116.78, 103.94), (58.40, 57.12, 57.38))
CIFAR_STATS = ((125.3, 123.0, 113.9), (63.0, 62.1, 66.7))
MNIST_STATS = ((33.32,), (78.57,))


@dataclass(frozen=True)
class Preprocessing:
    """How evaluation, `tfyard predict` and the serving signature turn an image of any size
    into the model's input (`preprocess.eval_image`): the central square holding `crop` of
    the short side, resized to `size`, `channels` (1 or 3) normalised by `mean` and `std`.
    Plain numbers, so run.json and the SavedModel record it and the three callers agree."""

    size: int
    channels: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    crop: float = 1.0

    @property
    def stats(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return self.mean, self.std

    def resized(self, size: int | None) -> Preprocessing:
        return self if not size else replace(self, size=size)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Preprocessing:
        return cls(int(values["size"]), int(values["channels"]), tuple(values["mean"]),
                   tuple(values["std"]), float(values["crop"]))


IMAGENET_EVAL = Preprocessing(224, 3, *IMAGENET_STATS, crop=0.875)


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    num_classes: int
    image_shape: tuple[int, int, int]  # (H, W, C) a model should take for this data
    num_examples: dict[str, int]  # {"train": n, "validation": m}
    preprocessing: Preprocessing | None = None   # the eval view at the data's own size
    class_names: tuple[str, ...] | None = None   # None: the data names none (ids are names)


@dataclass(frozen=True)
class Record:
    """One stored example as inspect sees it; `problem` is set when it cannot be used."""

    file: str
    index: int | None
    label: int | None = None
    size: tuple[int, int] | None = None  # (height, width) when known
    problem: str | None = None

    def __str__(self) -> str:
        where = self.file if self.index is None else f"{self.file}: record {self.index}"
        return f"{where}: {self.problem}"


def require_dir(name: str, data_dir: str | None) -> str:
    """`data_dir` if it is a directory; otherwise a UserError naming `--data_dir`."""
    if not data_dir:
        raise UserError(f"dataset {name!r} needs --data_dir (or TFYARD_DATA_DIR) pointing at "
                        "its files")
    if not os.path.isdir(data_dir):
        raise UserError(f"data directory {data_dir} does not exist; check --data_dir")
    return data_dir


def find_files(data_dir: str, patterns: list[str], what: str) -> list[str]:
    """Sorted files matching the first pattern that matches anything, else a UserError;
    in a folder read through a bucket's cache, its shards whether fetched yet or not."""
    for pattern in patterns:
        files = sorted({*glob.glob(os.path.join(glob.escape(data_dir), pattern)),
                        *(path for path in stream.listed(data_dir)
                          if fnmatch.fnmatchcase(os.path.basename(path), pattern))})
        if files:
            return files
    raise UserError(f"no {what} in {data_dir} (looked for {' or '.join(patterns)}); check "
                    "--data_dir and --dataset")


def check_label(label: int, num_classes: int) -> str | None:
    if 0 <= label < num_classes:
        return None
    return f"label {label} is outside 0..{num_classes - 1} for {num_classes} classes"
