"""Writers: an image folder, CIFAR binaries or MNIST -> ImageNet-style TFRecord shards.

Output is `DST/{train,validation}-%05d-of-%05d` plus `labels.txt` (`1:name`, labels 1..N as
in ImageNet) and the shards' record counts (`framing.INDEX_FILE`, so a reader, from a bucket
above all, counts no shard), read back with `--dataset imagenet`. An image folder is split
as training splits it (its validation folder, else the same 10 % of each class held out), so
the output trains as the folder does. Shards are written by a pool of processes, each put in
place whole (`tfyard.replace`), and a failed run removes the shards it wrote (a partial set
would read as a smaller dataset); the output depends only on the input and the seed. Output
names never come from input names, so nothing is written outside DST.

A destination is one set: an empty or new directory, or (`tfyard data convert --overwrite`,
which builds the new set beside it and swaps it in whole) one that holds only a set. Old and
new shards never lie side by side, where the old validation images would read as training
images. The writer processes write to the stderr they inherit: `tfyard data convert` filters
it first.
"""

from __future__ import annotations

import fnmatch
import io
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from tfyard.data.formats.framing import INDEX_FILE, write_index
from tfyard.errors import UserError
from tfyard.progress import Progress
from tfyard.replace import replacing_file, replacing_path


@dataclass(frozen=True)
class Item:
    """One example to write: an image file or an HxWxC uint8 array, and its stored label."""

    label: int
    text: str
    path: str | None = None
    pixels: np.ndarray | None = None
    pixel_format: str = "PNG"  # how arrays are encoded: lossless PNG, or JPEG


def printable(name: str) -> str:
    """A file name as text: undecodable bytes replaced, control characters made spaces."""
    text = os.fsencode(name).decode("utf-8", "replace")
    return "".join(" " if ch.isspace() or not ch.isprintable() else ch for ch in text)


def encode(item: Item) -> tuple[bytes, str, int, int, int]:
    """(bytes, format, height, width, channels): JPEG files kept, others made JPEG or PNG."""
    from PIL import Image

    if item.pixels is not None:
        image = Image.fromarray(item.pixels.squeeze())
        out = io.BytesIO()
        image.save(out, format=item.pixel_format, quality=90)
        return (out.getvalue(), item.pixel_format, image.height, image.width,
                len(image.getbands()))
    try:
        with open(item.path, "rb") as stream:
            data = stream.read()
        image = Image.open(io.BytesIO(data))
        image.load()
    except (OSError, SyntaxError, ValueError) as exc:
        raise UserError(f"{printable(item.path)}: not a readable image ({exc}); remove or "
                        "replace the file") from None
    if image.format == "JPEG" and image.mode == "RGB":
        return data, "JPEG", image.height, image.width, 3
    out = io.BytesIO()
    image.convert("RGB").save(out, format="JPEG", quality=95)
    return out.getvalue(), "JPEG", image.height, image.width, 3


def example(item: Item) -> bytes:
    """A serialized tf.train.Example with the ImageNet feature names."""
    import tensorflow as tf

    data, fmt, height, width, channels = encode(item)

    def ints(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    def text(v):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode("utf-8")]))

    empty = tf.train.Feature(float_list=tf.train.FloatList(value=[]))
    features = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
        "image/format": text(fmt),
        "image/class/label": ints(item.label),
        "image/class/text": text(item.text),
        "image/height": ints(height),
        "image/width": ints(width),
        "image/channels": ints(channels),
        "image/filename": text(printable(os.path.basename(item.path)) if item.path else ""),
        **{f"image/object/bbox/{k}": empty for k in ("xmin", "ymin", "xmax", "ymax")},
    }
    proto = tf.train.Example(features=tf.train.Features(feature=features))
    return proto.SerializeToString(deterministic=True)  # map order stable across processes


IMAGES_A_WORKER = 1000   # images that repay a writer process's start by default


def write_shard(path: str, items: list[Item]) -> int:
    """Write `items` to the shard `path`, put in place whole (`tfyard.replace`)."""
    import tensorflow as tf

    with replacing_path(path) as staging, tf.io.TFRecordWriter(staging) as writer:
        for item in items:
            writer.write(example(item))
    return len(items)


def write_text(path: str, text: str) -> None:
    with replacing_file(path) as stream:
        stream.write(text)


def _quiet_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _remove_written(paths: list[str]) -> None:
    """A failed conversion takes back its shards, finished or not."""
    for path in paths:
        if os.path.exists(path):
            os.remove(path)


SET_FILES = ("train-?????-of-?????", "validation-?????-of-?????", "labels.txt", INDEX_FILE)


def check_destination(src: str, dst: str, overwrite: bool = False) -> None:
    """Refuse, in one line before any work, a destination that would mix sets or lose files:
    a file, the source or a folder inside it, a set without `overwrite`, other files."""
    if os.path.lexists(dst) and not os.path.isdir(dst):
        raise UserError(f"destination {dst} is a file; give a directory for the shards")
    source, target = os.path.realpath(src), os.path.realpath(dst)
    if os.path.commonpath([source, target]) == source:
        where = "the source" if source == target else f"inside the source {src}"
        raise UserError(f"destination {dst} is {where}; write the shards to a directory "
                        "outside it")
    check_held(dst, sorted(os.listdir(dst)) if os.path.isdir(dst) else [], overwrite)


def check_held(dst: str, entries: list[str], overwrite: bool) -> None:
    """What the destination holds (`entries`, its top-level names): nothing, or with
    `overwrite` a converted set."""
    shards = [e for e in entries if any(fnmatch.fnmatchcase(e, p) for p in SET_FILES)]
    others = [e for e in entries if e not in shards]
    if others:
        raise UserError(f"destination {dst} holds other files than a converted set "
                        f"({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); "
                        "give a new or empty directory")
    if shards and not overwrite:
        raise UserError(f"destination {dst} already holds a converted set ({shards[0]}, ...); "
                        "pass --overwrite to replace it whole, or give a new directory")


def write_dataset(dst: str, splits: dict[str, list[Item]], class_names: list[str],
                  shards: int, workers: int | None = None, seed: int = 0) -> dict[str, int]:
    """Shuffle each split (fixed seed), deal it round-robin into shards, write in parallel."""
    if shards < 1:
        raise UserError(f"--shards must be at least 1, got {shards}")
    os.makedirs(dst, exist_ok=True)
    tasks = []
    for split, items in splits.items():
        count = shards if split == "train" else max(1, shards // 8)
        order = np.random.RandomState(seed).permutation(len(items))
        items = [items[i] for i in order]
        for shard in range(count):
            path = os.path.join(dst, f"{split}-{shard:05d}-of-{count:05d}")
            tasks.append((path, items[shard::count]))
    try:
        _write_shards(tasks, workers)
    except BaseException:  # a bad image, a full disk, Ctrl-C
        _remove_written([path for path, _ in tasks])
        raise
    write_index(dst, {os.path.basename(path): len(items) for path, items in tasks})
    write_text(os.path.join(dst, "labels.txt"),
               "".join(f"{i}:{name}\n" for i, name in enumerate(class_names, 1)))
    return {split: len(items) for split, items in splits.items()}


def _write_shards(tasks: list[tuple[str, list[Item]]], workers: int | None) -> None:
    """The shards `tasks` written by `workers` processes (None: one a core, but no more
    than the images need, as a process starting TensorFlow costs seconds of CPU)."""
    if not workers:
        images = sum(len(items) for _, items in tasks)
        workers = min(os.cpu_count() or 1, -(-images // IMAGES_A_WORKER))
    workers = max(1, min(workers, len(tasks)))
    with Progress(len(tasks), "shards", "writing", "wrote") as progress:
        if workers == 1:
            for path, items in tasks:
                write_shard(path, items)
                progress.advance()
            return
        import multiprocessing

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_quiet_tensorflow) as pool:
            futures = [pool.submit(write_shard, path, items) for path, items in tasks]
            try:
                for future in futures:
                    future.result()
                    progress.advance()
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)  # running writers finish first
                raise


def convert_imagefolder(src: str, dst: str, shards: int = 8,
                        validation_fraction: float | None = None, workers: int | None = None,
                        seed: int = 0) -> dict[str, int]:
    """Class sub-folders of images -> shards, split as training splits them; without a
    validation folder `validation_fraction` (default training's) of each class held out."""
    from tfyard.data.formats.folder import HOLD_OUT, split_dir, splits

    if not os.path.isdir(src):
        raise UserError(f"image folder {src} does not exist; check the path")
    check_destination(src, dst)
    if validation_fraction is not None:
        if not 0.0 < validation_fraction < 1.0:
            raise UserError(f"--validation_fraction must be between 0 and 1 (training reads "
                            f"validation shards), got {validation_fraction}")
        validation_dir = split_dir(src, "validation")
        if validation_dir is not None:
            raise UserError(f"{validation_dir} is the validation split; "
                            "drop --validation_fraction, or the folder")
    names, files = splits(src, validation_fraction or HOLD_OUT)
    if not files["validation"]:
        raise UserError(f"{src}: no image to hold out for validation (each class has one); "
                        "add images, or a validation/ folder")
    texts = [printable(n) for n in names]
    splits = {split: [Item(label + 1, texts[label], path=path) for path, label in found]
              for split, found in files.items()}
    return write_dataset(dst, splits, texts, shards, workers, seed)


def convert_arrays(dst: str, arrays: dict[str, tuple[np.ndarray, np.ndarray]],
                   class_names: list[str], shards: int, workers: int | None) -> dict[str, int]:
    """In-memory (images, 0-based labels) per split -> lossless PNG shards."""
    splits = {split: [Item(int(y) + 1, class_names[int(y)], pixels=x)
                      for x, y in zip(images, labels, strict=True)]
              for split, (images, labels) in arrays.items()}
    return write_dataset(dst, splits, class_names, shards, workers)


def convert_cifar10(src: str, dst: str, shards: int = 8,
                    workers: int | None = None) -> dict[str, int]:
    from tfyard.data.formats.cifar import class_names, load

    check_destination(src, dst)
    arrays = {split: load("cifar10", src, split) for split in ("train", "validation")}
    return convert_arrays(dst, arrays, class_names("cifar10", src), shards, workers)


def convert_mnist(src: str, dst: str, shards: int = 8,
                  workers: int | None = None) -> dict[str, int]:
    from tfyard.data.formats.mnist import load

    check_destination(src, dst)
    arrays = {split: load(src, split) for split in ("train", "validation")}
    return convert_arrays(dst, arrays, [str(d) for d in range(10)], shards, workers)


CONVERTERS = {"imagefolder": convert_imagefolder, "cifar10": convert_cifar10,
              "mnist": convert_mnist}
