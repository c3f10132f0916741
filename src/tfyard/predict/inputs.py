"""What to predict: image files, folders (recursive) and glob patterns, checked up front and
then listed lazily, one directory at a time, so a million files never sit in memory."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator

from tfyard.errors import UserError

EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")


def _is_image(path: str) -> bool:
    return path.lower().endswith(EXTENSIONS) and not os.path.basename(path).startswith(".")


def _walk(folder: str) -> Iterator[str]:
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        yield from (os.path.join(root, f) for f in sorted(files) if _is_image(f))


def _expand(entry: str) -> Iterator[str]:
    """The images of one INPUT: a file as named, a folder's images, a pattern's matches."""
    if os.path.isfile(entry):
        yield entry
    elif os.path.isdir(entry):
        yield from _walk(entry)
    elif glob.has_magic(entry):
        for match in sorted(glob.iglob(entry, recursive=True)):
            if os.path.isdir(match):
                yield from _walk(match)
            elif _is_image(match):
                yield match


def check(inputs: Iterable[str]) -> list[str]:
    """The inputs, each checked to exist and to hold an image, before any work."""
    inputs = [os.fspath(entry) for entry in inputs]
    if not inputs:
        raise UserError("no INPUT given; name image files, folders or glob patterns")
    for entry in inputs:
        if next(_expand(entry), None) is None:
            what = ("holds no images" if os.path.isdir(entry) else "matches no images"
                    if glob.has_magic(entry) else "does not exist")
            raise UserError(f"{entry} {what} ({'/'.join(EXTENSIONS)}); check the path")
    return inputs


def image_files(inputs: Iterable[str]) -> Iterator[str]:
    """Every image of the checked inputs, in order; files named twice are scored twice."""
    for entry in inputs:
        yield from _expand(entry)
