"""CIFAR-10/100 binary batches: fixed-length records of label byte(s) + 3072 CHW pixels.

CIFAR-10: `data_batch_1..5.bin`, `test_batch.bin`, 1 label byte per record.
CIFAR-100: `train.bin`, `test.bin`, a coarse then a fine label byte (the fine one is used).
"""

from __future__ import annotations

import os

import numpy as np

from tfyard.data.formats.base import (
    CIFAR_STATS,
    DatasetInfo,
    Preprocessing,
    Record,
    check_label,
    find_files,
    require_dir,
)
from tfyard.errors import UserError

PIXELS = 32 * 32 * 3
EVAL = Preprocessing(32, 3, *CIFAR_STATS)
_LAYOUT = {  # name -> (label bytes, classes, sub-folder, {split: patterns}, names file)
    "cifar10": (1, 10, "cifar-10-batches-bin",
                {"train": ["data_batch_[1-5].bin"], "validation": ["test_batch.bin"]},
                "batches.meta.txt"),
    "cifar100": (2, 100, "cifar-100-binary",
                 {"train": ["train.bin"], "validation": ["test.bin"]}, "fine_label_names.txt"),
}


def _root(name: str, data_dir: str | None) -> str:
    data_dir = require_dir(name, data_dir)
    nested = os.path.join(data_dir, _LAYOUT[name][2])
    return nested if os.path.isdir(nested) else data_dir


def files(name: str, data_dir: str | None, split: str) -> list[str]:
    """The split's batch files, each checked to hold whole records."""
    label_bytes, _, _, patterns, _ = _LAYOUT[name]
    found = find_files(_root(name, data_dir), patterns[split], f"{name} {split} batches")
    for path in found:
        size = os.path.getsize(path)
        if size == 0 or size % (label_bytes + PIXELS):
            raise UserError(f"{path}: {size} bytes is not a whole number of "
                            f"{label_bytes + PIXELS}-byte {name} records (truncated?); "
                            "re-download it")
    return found


def class_names(name: str, data_dir: str) -> list[str]:
    classes = _LAYOUT[name][1]
    path = os.path.join(_root(name, data_dir), _LAYOUT[name][4])
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as stream:
            names = [line.strip() for line in stream if line.strip()]
        if len(names) == classes:
            return names
    return [str(i) for i in range(classes)]


def _records(path: str, label_bytes: int) -> np.ndarray:
    return np.fromfile(path, np.uint8).reshape(-1, label_bytes + PIXELS)


def load(name: str, data_dir: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(images [N,32,32,3] uint8, labels [N]) of one split, labels checked."""
    label_bytes, classes = _LAYOUT[name][:2]
    images, labels = [], []
    for path in files(name, data_dir, split):
        records = _records(path, label_bytes)
        bad = np.flatnonzero(records[:, label_bytes - 1] >= classes)
        if bad.size:
            raise UserError(f"{path}: record {bad[0]}: "
                            f"{check_label(int(records[bad[0], label_bytes - 1]), classes)}")
        labels.append(records[:, label_bytes - 1].astype(np.int64))
        images.append(records[:, label_bytes:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return np.concatenate(images), np.concatenate(labels)


def info(name, data_dir, cache_dir=None, **_):
    label_bytes, classes = _LAYOUT[name][:2]
    counts = {split: sum(os.path.getsize(f) // (label_bytes + PIXELS)
                         for f in files(name, data_dir, split))
              for split in ("train", "validation")}
    return DatasetInfo(name, classes, (32, 32, 3), counts, EVAL,
                       tuple(class_names(name, data_dir)))


def build(name, data_dir, spec):
    import tensorflow as tf

    import tfyard.data.preprocess as pp
    from tfyard.data.formats.tfrecord import checked_label
    from tfyard.data.order import random_access
    from tfyard.data.pipeline import addressed, assemble

    label_bytes, classes = _LAYOUT[name][:2]
    paths = files(name, data_dir, spec.split)
    view = EVAL.resized(spec.image_size)

    def decode(record, seed=None):
        raw = tf.io.decode_raw(record, tf.uint8)
        label = checked_label(raw[label_bytes - 1], classes, 0)
        image = tf.transpose(tf.reshape(raw[label_bytes:], [3, 32, 32]), [1, 2, 0])
        if not spec.training:
            return pp.eval_image(image, view, spec.dtype), label
        image = pp.pad_crop(image, 4, flip=True, seed=seed)
        image = pp.resize(tf.cast(image, tf.float32), spec.image_size)
        return pp.normalise(image, view.stats, spec.dtype), label

    def open_file(path):
        return tf.data.FixedLengthRecordDataset(path, label_bytes + PIXELS)

    if spec.deterministic:
        total = sum(os.path.getsize(p) // (label_bytes + PIXELS) for p in paths)
        return addressed(random_access(open_file(paths), total, spec), decode, spec)
    return assemble(tf.data.Dataset.from_tensor_slices(paths), decode, spec,
                    open_file=open_file, num_files=len(paths), cache=True)


def scan(name, data_dir, split, decode=False, **_):
    label_bytes, classes = _LAYOUT[name][:2]
    for path in files(name, data_dir, split):
        for index, label in enumerate(_records(path, label_bytes)[:, label_bytes - 1]):
            yield Record(path, index, int(label), (32, 32), check_label(int(label), classes))
