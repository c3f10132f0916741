"""Writers of small datasets in their true on-disk formats, used by the data tests."""

from __future__ import annotations

import gzip
import io
import os

import numpy as np
from PIL import Image


def image_bytes(pixels: np.ndarray, fmt: str = "JPEG") -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt, quality=95)
    return out.getvalue()


def coloured(label: int, height: int = 40, width: int = 48) -> np.ndarray:
    """An image whose red channel encodes its label, so tests can tell images apart."""
    pixels = np.zeros((height, width, 3), np.uint8)
    pixels[..., 0] = 20 * label
    pixels[..., 1] = 100
    return pixels


def speckled(label: int, height: int = 64, width: int = 80) -> np.ndarray:
    """`coloured`'s image with its label's fixed noise in the green channel: a JPEG some
    kilobytes large, where a shard must outweigh the small files beside it."""
    pixels = coloured(label, height, width)
    pixels[..., 1] = np.random.default_rng(label).integers(0, 256, (height, width))
    return pixels


def tf_example(encoded: bytes, label: int, box=None) -> bytes:
    import tensorflow as tf

    def floats(v):
        return tf.train.Feature(float_list=tf.train.FloatList(value=v))

    feature = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        "image/class/text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"c"])),
    }
    if box:
        for key, value in zip(("ymin", "xmin", "ymax", "xmax"), box, strict=True):
            feature[f"image/object/bbox/{key}"] = floats([value])
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_records(path, records) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)


def write_imagenet(root, labels_by_shard: dict[str, list[list[int]]], box=None,
                   pixels=coloured) -> None:
    """ImageNet layout: `<split>-%05d-of-%05d` shards of real JPEGs (`pixels(label)`),
    labels 1-based."""
    os.makedirs(root, exist_ok=True)
    for split, shards in labels_by_shard.items():
        for i, labels in enumerate(shards):
            write_records(os.path.join(root, f"{split}-{i:05d}-of-{len(shards):05d}"),
                          [tf_example(image_bytes(pixels(lab)), lab, box) for lab in labels])


def write_cifar(root, name: str, splits: dict[str, list[list[int]]]) -> None:
    """CIFAR binary records: label byte(s) then the 32x32 image as R, G, B planes."""
    os.makedirs(root, exist_ok=True)
    for filename, labels in splits.items():
        with open(os.path.join(root, filename), "wb") as stream:
            for label in labels:
                planes = np.stack([np.full((32, 32), (10 * label) % 256, np.uint8),
                                   np.full((32, 32), 7, np.uint8),
                                   np.full((32, 32), 200, np.uint8)])
                prefix = [label] if name == "cifar10" else [label // 5, label]
                stream.write(bytes(prefix) + planes.tobytes())


def write_idx(path, array: np.ndarray) -> None:
    """An IDX file of unsigned bytes: magic 0 0 8 ndim, big-endian dims, data; gzipped."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as stream:
        stream.write(header + array.astype(np.uint8).tobytes())


def mnist_arrays(count: int, seed: int):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, count)
    images = np.zeros((count, 28, 28), np.uint8)
    images[:, :, :] = (labels * 25)[:, None, None]
    return images, labels.astype(np.uint8)


def write_folder(root, counts: dict[str, int], fmt: str = "JPEG") -> None:
    for label, (name, count) in enumerate(sorted(counts.items())):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(count):
            ext = "jpg" if fmt == "JPEG" else "png"
            with open(os.path.join(root, name, f"{i}.{ext}"), "wb") as stream:
                stream.write(image_bytes(coloured(label), fmt))


def collect(dataset):
    """All (images, labels) of a finite dataset as numpy arrays."""
    images, labels = [], []
    for x, y in dataset:
        images.append(x.numpy())
        labels.append(y.numpy())
    return np.concatenate(images), np.concatenate(labels)
