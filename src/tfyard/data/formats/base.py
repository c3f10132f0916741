"""What every reader shares: the facts it reports and the checks it makes on a data dir.

A leaf module: the readers import it, it imports no reader and not the registry.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from tfyard.errors import UserError


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    num_classes: int
    image_shape: tuple[int, int, int]  # (H, W, C) a model should take for this data
    num_examples: dict[str, int]  # {"train": n, "validation": m}


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
    """Sorted files matching the first pattern that matches anything, else a UserError."""
    for pattern in patterns:
        files = sorted(glob.glob(os.path.join(glob.escape(data_dir), pattern)))
        if files:
            return files
    raise UserError(f"no {what} in {data_dir} (looked for {' or '.join(patterns)}); check "
                    "--data_dir and --dataset")


def check_label(label: int, num_classes: int) -> str | None:
    if 0 <= label < num_classes:
        return None
    return f"label {label} is outside 0..{num_classes - 1} for {num_classes} classes"
