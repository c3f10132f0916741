"""A directory of class sub-folders of JPEG/PNG images, read directly.

`DATA_DIR/<split>/<class>/*` when a split folder exists, else `DATA_DIR/<class>/*` for
training. Classes are the sorted sub-folder names of the training folder.
"""

from __future__ import annotations

import os

from tfyard.data.formats.base import DatasetInfo, Record, require_dir
from tfyard.errors import UserError

EXTENSIONS = (".jpg", ".jpeg", ".png")
_SPLIT_DIRS = {"train": ("train",), "validation": ("validation", "val", "test")}


def list_images(root: str, classes: list[str] | None = None):
    """(class names, [(path, label)]) sorted; `classes` fixes the names (validation)."""
    if not os.path.isdir(root):
        raise UserError(f"image folder {root} does not exist; check the path")
    names = classes or sorted(e.name for e in os.scandir(root)
                              if e.is_dir() and not e.name.startswith("."))
    if not names:
        raise UserError(f"{root} has no class sub-folders; put each class's images in "
                        f"{root}/<class>/")
    files = []
    for label, name in enumerate(names):
        folder = os.path.join(root, name)
        if os.path.isdir(folder):
            files += [(os.path.join(folder, f), label) for f in sorted(os.listdir(folder))
                      if f.lower().endswith(EXTENSIONS) and not f.startswith(".")]
    if not files:
        raise UserError(f"no {'/'.join(EXTENSIONS)} images under {root}/<class>/; check the "
                        "path")
    return names, files


def split_dir(data_dir: str | None, split: str) -> str:
    data_dir = require_dir("folder", data_dir)
    for name in _SPLIT_DIRS[split]:
        if os.path.isdir(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
    if split == "train":
        return data_dir
    raise UserError(f"no validation/ folder in {data_dir}; add {data_dir}/validation/<class>/ "
                    "images or convert with --validation_fraction")


def listing(data_dir: str | None, split: str):
    classes, _ = list_images(split_dir(data_dir, "train"))
    if split == "train":
        return classes, list_images(split_dir(data_dir, "train"))[1]
    return classes, list_images(split_dir(data_dir, split), classes)[1]


def info(name, data_dir, cache_dir=None, **_):
    classes, train = listing(data_dir, "train")
    try:
        validation = len(listing(data_dir, "validation")[1])
    except UserError:
        validation = 0
    return DatasetInfo(name, len(classes), (224, 224, 3),
                       {"train": len(train), "validation": validation})


def build(name, data_dir, spec):
    import tensorflow as tf

    import tfyard.data.preprocess as pp
    from tfyard.data.order import random_access
    from tfyard.data.pipeline import addressed, assemble

    _, files = listing(data_dir, spec.split)
    size = spec.image_size or 224
    paths, labels = zip(*files, strict=True)

    def decode(path, label, seed=None):
        encoded = tf.io.read_file(path)
        image = (pp.inception_crop(encoded, size, seed=seed) if spec.training
                 else pp.central_crop(encoded, size))
        return pp.normalise(image, pp.IMAGENET_STATS, spec.dtype), tf.cast(label, tf.int32)

    source = tf.data.Dataset.from_tensor_slices(([os.fsencode(p) for p in paths], list(labels)))
    if spec.deterministic:
        return addressed(random_access(source, len(files), spec), decode, spec)
    return assemble(source, decode, spec)


def scan(name, data_dir, split, decode=False, **_):
    from PIL import Image

    for path, label in listing(data_dir, split)[1]:
        try:
            with Image.open(path) as image:
                if decode:
                    image.load()
                yield Record(path, None, label, (image.height, image.width))
        except (OSError, SyntaxError, ValueError) as exc:
            yield Record(path, None, label, problem=f"cannot decode: {exc}")
