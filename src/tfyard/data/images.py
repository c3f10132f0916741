"""What counts as an image file, and the walk that finds them: one rule for training's folder
reader, `data convert`, `data inspect` and `predict` on every engine.

It is the rule of Keras's `image_dataset_from_directory`, the convention users bring: the
extensions it reads, in any case, found recursively without following symlinked folders.
Dot-files and dot-folders (`.DS_Store`, `._x.jpg`, `.ipynb_checkpoints/`) are never images.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from tfyard.storage import stream

IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")


def is_image(path: str) -> bool:
    """True for a file name with an image extension (any case) that is not a dot-file."""
    name = os.path.basename(path)
    return name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith(".")


def walk_images(folder: str) -> Iterator[str]:
    """The images under `folder`, recursively, sorted within each folder, lazily; for a
    folder read through a bucket's cache, those its listing names, in the same order."""
    if stream.streamed(os.path.join(folder, "")):
        yield from listed_images(folder, stream.listed(folder))
        return
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        yield from (os.path.join(root, f) for f in sorted(files) if is_image(f))


def listed_images(folder: str, paths: list[str]) -> list[str]:
    """The images among `paths` (files under `folder`, as a listing names them), in
    `walk_images`' order: a folder's own files by name, then each sub-folder's, by name."""
    order = {}
    for path in paths:
        *folders, name = os.path.relpath(path, folder).split(os.sep)
        if is_image(name) and not any(part.startswith(".") for part in folders):
            order[path] = [(1, part) for part in folders] + [(0, name)]
    return sorted(order, key=order.__getitem__)
