"""MNIST: `mnist.npz` (x_train y_train x_test y_test) or the four IDX `.gz` files.

Small enough to load into memory, so the pipeline slices arrays (sharded by record).
"""

from __future__ import annotations

import gzip
import os
import zipfile

import numpy as np

from tfyard.data.formats.base import (
    MNIST_STATS,
    DatasetInfo,
    Preprocessing,
    Record,
    check_label,
    require_dir,
)
from tfyard.errors import UserError

_IDX = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
        "validation": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
_NPZ = {"train": ("x_train", "y_train"), "validation": ("x_test", "y_test")}
EVAL = Preprocessing(28, 1, *MNIST_STATS)


def read_idx(path: str, dims: int) -> np.ndarray:
    """An IDX file of unsigned bytes with `dims` dimensions, its header checked."""
    try:
        with gzip.open(path, "rb") as stream:
            data = stream.read()
    except (OSError, EOFError) as exc:
        raise UserError(f"{path}: not a readable gzip file ({exc}); re-download it") from None
    header = 4 + 4 * dims
    if len(data) < header or data[:4] != bytes([0, 0, 8, dims]):
        raise UserError(f"{path}: not an IDX file of unsigned bytes with {dims} dimensions; "
                        "re-download it")
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    if len(data) - header != int(np.prod(shape)):
        raise UserError(f"{path}: holds {len(data) - header} bytes, its header promises "
                        f"{int(np.prod(shape))} (truncated?); re-download it")
    return np.frombuffer(data, np.uint8, offset=header).reshape(shape)


def source(data_dir: str) -> str:
    """Which file holds the data: `mnist.npz` if present, else the IDX directory."""
    npz = os.path.join(require_dir("mnist", data_dir), "mnist.npz")
    if os.path.exists(npz):
        return npz
    missing = [f for pair in _IDX.values() for f in pair
               if not os.path.exists(os.path.join(data_dir, f))]
    if missing:
        raise UserError(f"no mnist.npz and no {', '.join(missing)} in {data_dir}; check "
                        "--data_dir")
    return data_dir


def load(data_dir: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(images [N,28,28] uint8, labels [N] int64), counts and labels checked."""
    where = source(data_dir)
    if where.endswith(".npz"):
        try:
            with np.load(where) as arrays:
                images, labels = (np.asarray(arrays[k]) for k in _NPZ[split])
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
            raise UserError(f"{where}: unreadable or missing {'/'.join(_NPZ[split])} ({exc}); "
                            "re-download it") from None
        names = (where, where)
    else:
        names = tuple(os.path.join(where, f) for f in _IDX[split])
        images, labels = read_idx(names[0], 3), read_idx(names[1], 1)
    if images.ndim != 3 or len(images) != len(labels):
        raise UserError(f"{names[0]}: {images.shape} images do not match {len(labels)} labels "
                        f"in {names[1]}; re-download the data")
    bad = np.flatnonzero((labels < 0) | (labels > 9))
    if bad.size:
        raise UserError(f"{names[1]}: record {bad[0]}: {check_label(int(labels[bad[0]]), 10)}")
    return images.astype(np.uint8), labels.astype(np.int64)


def info(name, data_dir, cache_dir=None, **_):
    counts = {split: len(load(data_dir, split)[1]) for split in _NPZ}
    return DatasetInfo(name, 10, (28, 28, 1), counts, EVAL, tuple(map(str, range(10))))


def build(name, data_dir, spec):
    import tensorflow as tf

    import tfyard.data.preprocess as pp
    from tfyard.data.order import random_access
    from tfyard.data.pipeline import addressed, assemble

    images, labels = load(data_dir, spec.split)
    view = EVAL.resized(spec.image_size)

    def decode(image, label, seed=None):  # no augmentation: training sees the eval view
        return pp.eval_image(image[..., tf.newaxis], view, spec.dtype), tf.cast(label, tf.int32)

    source = tf.data.Dataset.from_tensor_slices((images, labels))
    if spec.deterministic:
        return addressed(random_access(source, len(labels), spec), decode, spec)
    return assemble(source, decode, spec)


def scan(name, data_dir, split, decode=False, **_):
    images, labels = load(data_dir, split)
    path = source(data_dir)
    for index, label in enumerate(labels):
        yield Record(path, index, int(label), images.shape[1:3])
