"""What to predict: image files, folders (recursive) and glob patterns, checked up front and
then listed lazily, one directory at a time, so a million files never sit in memory.

This is the one listing of INPUT for every engine: local predict, and the driver of
`--on spark|ray`, whose workers are handed the paths listed here. What counts as an image is
training's rule (`data.images`): Keras's extensions in any case, no dot-files or dot-folders,
symlinked files listed, symlinked folders not followed.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Iterator

from tfyard.data.images import IMAGE_EXTENSIONS, is_image, walk_images
from tfyard.errors import UserError
from tfyard.storage import in_bucket, object_urls, read_object, readable_path


def lists(entry: str) -> bool:
    """Whether an INPUT entry is listed (a folder, a pattern that is no file's name, a
    bucket's prefix) rather than taken as the one file it names."""
    return in_bucket(entry, "INPUT") or (
        not os.path.isfile(entry) and (os.path.isdir(entry) or glob.has_magic(entry)))


def content(path: str):
    """What the Predictor reads for a listed image: its path, or for an object in a bucket
    its bytes (a missing one stays a path to nothing)."""
    return (read_object(path, "INPUT") or path) if in_bucket(path, "INPUT") else path


def _expand(entry: str) -> Iterator[str]:
    """The images of one INPUT: a file as named, a folder's images, a pattern's matches, the
    images of a bucket's prefix (their URLs, which the engines' workers read)."""
    if in_bucket(entry, "INPUT"):   # no dot-folders there either
        inside = len(entry.rstrip("/")) + 1
        yield from (url for url in object_urls(entry, "INPUT") if is_image(url) and not any(
            part.startswith(".") for part in url[inside:].split("/")))
    elif os.path.isfile(entry):
        yield entry
    elif os.path.isdir(entry):
        yield from walk_images(entry)
    elif glob.has_magic(entry):
        for match in sorted(glob.iglob(entry, recursive=True)):
            if os.path.isdir(match):
                yield from walk_images(match)
            elif is_image(match):
                yield match


def check(inputs: Iterable[str]) -> list[str]:
    """The inputs, each checked to exist and to hold an image, before any work."""
    inputs = [os.fspath(entry) for entry in inputs]
    if not inputs:
        raise UserError("no INPUT given; name image files, folders or glob patterns")
    for entry in inputs:
        if next(_expand(entry), None) is None:
            what = ("holds no images" if os.path.isdir(entry) or in_bucket(entry, "INPUT") else
                    "matches no images" if glob.has_magic(entry) else "does not exist")
            raise UserError(f"{entry} {what} ({'/'.join(IMAGE_EXTENSIONS)}); check the path")
    return inputs


def localized(inputs: Iterable[str]) -> tuple[list[str], Callable[[str], str]]:
    """INPUT with each entry in a bucket (an object or a prefix) replaced by its copy on
    local disk, and the function that names a listed file as the user gave it (its URL)."""
    inputs, copies = [os.fspath(entry) for entry in inputs], {}
    for number, entry in enumerate(inputs):
        if in_bucket(entry, "INPUT"):
            inputs[number] = readable_path(entry.rstrip("/"), None, "INPUT")
            copies[inputs[number]] = entry.rstrip("/")

    def named(path: str) -> str:
        for local, url in copies.items():
            if path == local or path.startswith(local + os.sep):
                return url + path[len(local):].replace(os.sep, "/")
        return path

    return inputs, named


def image_files(inputs: Iterable[str]) -> Iterator[str]:
    """Every image of the checked inputs, in order; files named twice are scored twice."""
    for entry in inputs:
        yield from _expand(entry)
