"""What counts as an image file, and the walk that finds them: one rule for training's folder
reader, `data convert`, `data inspect` and `predict` on every engine.

It is the rule of Keras's `image_dataset_from_directory`, the convention users bring: the
extensions it reads, in any case, found recursively without following symlinked folders.
Dot-files and dot-folders (`.DS_Store`, `._x.jpg`, `.ipynb_checkpoints/`) are never images.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")


def is_image(path: str) -> bool:
    """True for a file name with an image extension (any case) that is not a dot-file."""
    name = os.path.basename(path)
    return name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith(".")


def walk_images(folder: str) -> Iterator[str]:
    """The images under `folder`, recursively, sorted within each folder, lazily."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        yield from (os.path.join(root, f) for f in sorted(files) if is_image(f))
