"""Input pipeline throughput: tfyard's ImageNet training pipeline vs a straightforward one.

Writes its own ~400x350 JPEG TFRecords to a temp dir, then measures images/sec of
(a) `tfyard.data.build_dataset("imagenet", "train")`: parallel interleave, fused
decode-and-crop, parallel map, prefetch; and (b) a baseline: full decode, then random
crop, serial map, no interleave or prefetch. Prints both and the ratio.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfyard.data import build_dataset, preprocess  # noqa: E402
from tfyard.data.convert import Item, write_shard  # noqa: E402


def write_data(root: str, images: int, shards: int) -> None:
    """Smooth random ~400x350 photos-like JPEGs with 1-based labels, ImageNet shard names."""
    rng = np.random.RandomState(0)
    for shard in range(shards):
        items = []
        for _ in range(shard, images, shards):
            height, width = rng.randint(330, 370), rng.randint(380, 420)
            small = rng.randint(0, 256, (height // 8 + 1, width // 8 + 1, 3)).astype(np.uint8)
            pixels = np.kron(small, np.ones((8, 8, 1), np.uint8))[:height, :width]
            items.append(Item(int(rng.randint(1, 1001)), "class", pixels=pixels,
                              pixel_format="JPEG"))
        write_shard(os.path.join(root, f"train-{shard:05d}-of-{shards:05d}"), items)


def baseline(root: str, batch_size: int, size: int):
    """Serial and eager-shaped: read files in order, decode whole images, then crop."""
    files = sorted(tf.io.gfile.glob(os.path.join(root, "train-*")))

    def decode(record):
        parsed = tf.io.parse_single_example(record, {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)})
        image = tf.io.decode_jpeg(parsed["image/encoded"], channels=3)
        image = tf.image.random_crop(image, [224, 224, 3])
        image = tf.image.resize(tf.image.random_flip_left_right(image), [size, size])
        image = preprocess.normalise(image, preprocess.IMAGENET_STATS, "float32")
        return image, tf.cast(parsed["image/class/label"], tf.int32) - 1

    return (tf.data.TFRecordDataset(files).shuffle(1000).repeat().map(decode)
            .batch(batch_size, drop_remainder=True))


def rate(dataset, batches: int, batch_size: int, warmup: int = 1) -> float:
    """Images per second over `batches` batches, after `warmup` batches."""
    iterator = iter(dataset)
    for _ in range(warmup):
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch_size / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256, help="images to write")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--batches", type=int, default=24, help="batches timed per pipeline")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfyard-bench-") as root:
        write_data(root, args.images, args.shards)
        tfyard = build_dataset("imagenet", "train", root, batch_size=args.batch_size,
                               image_size=args.image_size)
        fast = rate(tfyard, args.batches, args.batch_size)
        slow = rate(baseline(root, args.batch_size, args.image_size), args.batches,
                    args.batch_size)
    print(f"cpus: {os.cpu_count()}  images written: {args.images}  batch: {args.batch_size}")
    print(f"baseline (full decode, then crop; serial): {slow:8.1f} images/sec")
    print(f"tfyard   (fused decode-crop; parallel):    {fast:8.1f} images/sec")
    print(f"ratio tfyard/baseline: {fast / slow:.2f}x")


if __name__ == "__main__":
    main()
