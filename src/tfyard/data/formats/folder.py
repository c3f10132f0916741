"""A directory of class sub-folders of images, read directly (`imagefolder`).

`DATA_DIR/<split>/<class>/...` when a split folder exists, else `DATA_DIR/<class>/...` for
training. Classes are the sorted sub-folder names of the training folder; each class folder
is walked as Keras's `image_dataset_from_directory` walks it (`tfyard.data.images`: sub-folders
too, `.bmp .gif .jpeg .jpg .png` in any case, symlinked folders not followed), so a model
trained here knows the classes a Keras user's folder holds. A class folder with no image, or
a validation folder whose classes are not the training folder's, is refused in one line: either
would train or score a model on other classes than the user's without a word.

Without a `validation/` (or `val/`, `test/`) folder, HOLD_OUT of each class's training
images (evenly spaced in name order, so every run holds out the same ones) become the
validation split, with a note when the dataset is first looked at: a run then evaluates,
writes its summary and exports, where it used to train every step and fail at the end.
`data convert` holds out the same images (`held_out`).

In a bucket larger than the data cache, the images stream through it (`streams`,
`storage.stream`): classes and images come from the bucket's listing, each image is read
through the cache (`data.fetched.contents`), in the seeded order it was announced in.
"""

from __future__ import annotations

import logging
import os

from tfyard.data.formats.base import IMAGENET_EVAL, DatasetInfo, Record, require_dir
from tfyard.data.images import IMAGE_EXTENSIONS, is_image, walk_images
from tfyard.errors import UserError
from tfyard.storage import stream

_SPLIT_DIRS = {"train": ("train",), "validation": ("validation", "val", "test")}
HOLD_OUT = 0.1  # of each class, when there is no validation folder
_noted: set[tuple[str, float]] = set()
log = logging.getLogger("tfyard")


def streams(name: str, object_name: str) -> bool:
    """Whether the object `object_name` (under a bucket prefix) is an image: a set larger
    than the data cache reads its images through it, in reading order."""
    return is_image(object_name)


def class_folders(root: str) -> list[str]:
    """The class names of `root`: its sub-folders (symlinked ones too, as Keras lists them),
    sorted, dot-folders left out."""
    if not os.path.isdir(root):
        raise UserError(f"image folder {root} does not exist; check the path")
    names = sorted(e.name for e in os.scandir(root)
                   if e.is_dir() and not e.name.startswith("."))
    if not names:
        raise UserError(f"{root} has no class sub-folders; put each class's images in "
                        f"{root}/<class>/")
    return names


def list_images(root: str, classes: list[str] | None = None):
    """(class names, [(path, label)]), each class's images in walk order; `classes` are the
    other split's names, which `root`'s own must equal."""
    names = class_folders(root)
    if classes is not None and names != list(classes):
        raise UserError(f"the classes of {root} differ from the training folder's: "
                        f"{_difference(names, classes)}; give both splits the same class "
                        "sub-folders")
    files = []
    for label, name in enumerate(names):
        found = [(path, label) for path in walk_images(os.path.join(root, name))]
        if not found:
            raise UserError(f"class {name!r} ({os.path.join(root, name)}) holds no image "
                            f"({' '.join(IMAGE_EXTENSIONS)}, sub-folders included); add its "
                            "images or remove the folder")
        files += found
    return names, files


def _difference(names: list[str], expected: list[str]) -> str:
    missing = [n for n in expected if n not in names]
    extra = [n for n in names if n not in expected]
    return "; ".join(part for part in (
        missing and f"it lacks {', '.join(missing)}",
        extra and f"it has {', '.join(extra)} besides") if part)


def split_dir(data_dir: str | None, split: str) -> str | None:
    """The folder of `split`; None for a validation split that has none (held out)."""
    data_dir = require_dir("imagefolder", data_dir)
    for name in _SPLIT_DIRS[split]:
        if os.path.isdir(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
    return data_dir if split == "train" else None


def held_out(files: list[tuple[str, int]], fraction: float = HOLD_OUT) -> set[int]:
    """Indices of `fraction` of each class's files, evenly spaced; none of a 1-image class."""
    by_class: dict[int, list[int]] = {}
    for i, (_, label) in enumerate(files):
        by_class.setdefault(label, []).append(i)
    chosen = set()
    for indices in by_class.values():
        count = round(fraction * len(indices)) or (1 if len(indices) > 1 else 0)
        chosen.update(indices[int((j + 0.5) * len(indices) / count)] for j in range(count))
    return chosen


def splits(data_dir: str | None, fraction: float = HOLD_OUT):
    """(class names, {"train": files, "validation": files}): the validation folder's, else
    `fraction` of each class held out; training and `data convert` split alike."""
    train_dir = split_dir(data_dir, "train")
    classes, files = list_images(train_dir)
    validation_dir = split_dir(data_dir, "validation")
    if validation_dir is not None:
        return classes, {"train": files,
                         "validation": list_images(validation_dir, classes)[1]}
    held = held_out(files, fraction)
    if (train_dir, fraction) not in _noted:
        _noted.add((train_dir, fraction))
        log.info(f"tfyard: note: no validation/ folder in {data_dir}; holding out {len(held)} "
                 f"of the {len(files)} images ({fraction:.0%} of each class) for validation")
    return classes, {"train": [f for i, f in enumerate(files) if i not in held],
                     "validation": [f for i, f in enumerate(files) if i in held]}


def listing(data_dir: str | None, split: str):
    classes, files = splits(data_dir)
    return classes, files[split]


def info(name, data_dir, cache_dir=None, **_):
    classes, files = splits(data_dir)
    return DatasetInfo(name, len(classes), (224, 224, 3),
                       {split: len(found) for split, found in files.items()}, IMAGENET_EVAL,
                       tuple(classes))


def build(name, data_dir, spec):
    import tensorflow as tf

    import tfyard.data.preprocess as pp
    from tfyard.data.fetched import contents
    from tfyard.data.order import random_access
    from tfyard.data.pipeline import addressed, assemble

    _, files = listing(data_dir, spec.split)
    if not files:   # a held-out split of 1-image classes
        raise UserError(f"the {spec.split} split of {data_dir} holds no image; give each "
                        "class more than one image, or a validation/ folder")
    view = IMAGENET_EVAL.resized(spec.image_size)
    paths, labels = zip(*files, strict=True)
    read, announce = contents(paths)

    def decode(path, label, seed=None):
        encoded = read(path)
        image = (pp.normalise(pp.inception_crop(encoded, view.size, seed=seed),
                              view.stats, spec.dtype) if spec.training
                 else pp.eval_image(encoded, view, spec.dtype))
        return image, tf.cast(label, tf.int32)

    source = tf.data.Dataset.from_tensor_slices(([os.fsencode(p) for p in paths], list(labels)))
    if spec.deterministic:
        return addressed(random_access(source, len(files), spec, announce), decode, spec)
    return assemble(source, decode, spec)


def scan(name, data_dir, split, decode=False, **_):
    from PIL import Image

    files = listing(data_dir, split)[1]
    stream.announce([path for path, _ in files])   # a bucket's images fetched ahead
    for path, label in files:
        try:
            with stream.held(path) as local, Image.open(local) as image:
                if decode:
                    image.load()
                yield Record(path, None, label, (image.height, image.width))
        except (OSError, SyntaxError, ValueError) as exc:
            yield Record(path, None, label, problem=f"cannot decode: {exc}")
