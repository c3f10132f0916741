"""Random images and labels made on the device once and repeated: input cost ~zero.

For benchmarks that measure the model, not the input pipeline. `synthetic` is shaped like
ImageNet, `synthetic_<name>` like the dataset it stands in for (size, channels, classes,
training examples), so a model is benched on the input its family trains on.
"""

from __future__ import annotations

import tfyard.data.formats.cifar as cifar
import tfyard.data.formats.mnist as mnist
from tfyard.data.formats.base import IMAGENET_EVAL, DatasetInfo
from tfyard.data.formats.tfrecord import IMAGENET_COUNTS
from tfyard.errors import UserError

# Random images teach nothing, so evaluating on more than a few batches only costs time.
VALIDATION = 1024
# the dataset a synthetic one stands in for -> (image side, channels, classes, train size)
SHAPES = {
    "imagenet": (224, 3, 1000, IMAGENET_COUNTS["train"]),
    "cifar10": (32, 3, 10, 50_000),
    "cifar100": (32, 3, 100, 50_000),
    "mnist": (28, 1, 10, 60_000),
}
POOL = 32  # distinct images of a seeded run
# How real images are prepared for a model trained here: as for the data it stands in for.
EVAL = {"imagenet": IMAGENET_EVAL, "cifar10": cifar.EVAL, "cifar100": cifar.EVAL,
        "mnist": mnist.EVAL}


def twin(dataset: str) -> str:
    """The synthetic dataset shaped like `dataset` (`synthetic` is ImageNet's)."""
    if dataset not in SHAPES:
        raise UserError(f"no synthetic data is shaped like {dataset}; synthetic data stands "
                        f"in for {', '.join(SHAPES)}: pass one of them, or real files")
    return "synthetic" if dataset == "imagenet" else f"synthetic_{dataset}"


def _twin_of(name: str) -> str:
    return "imagenet" if name == "synthetic" else name.removeprefix("synthetic_")


def _shape(name: str):
    return SHAPES[_twin_of(name)]


def _counts(train: int) -> dict[str, int]:
    return {"train": train, "validation": VALIDATION}


def info(name, data_dir=None, cache_dir=None, image_size=None, num_examples=None, **_):
    side, channels, classes, train = _shape(name)
    size = image_size or side
    counts = {s: num_examples or n for s, n in _counts(train).items()}
    return DatasetInfo(name, classes, (size, size, channels), counts,
                       EVAL[_twin_of(name)].resized(size))


def build(name, data_dir, spec):
    """One batch, repeated. In a seeded run a pool of POOL images is drawn statelessly and
    example k is row k mod POOL, so the content too is a function of position whatever the
    batch size (one gather a batch)."""
    import tensorflow as tf

    from tfyard.data.pipeline import finish

    side, channels, classes, train = _shape(name)
    size = spec.image_size or side
    count = spec.num_examples or _counts(train)[spec.split]
    shape = [spec.batch_size, size, size, channels]
    if not spec.deterministic:
        images = tf.random.truncated_normal(shape, seed=spec.seed)
        labels = tf.random.uniform([spec.batch_size], maxval=classes, dtype=tf.int32,
                                   seed=spec.seed)
        dataset = tf.data.Dataset.from_tensors((tf.cast(images, spec.dtype), labels))
        return finish(dataset.repeat(None if spec.repeated
                                     else max(1, count // spec.batch_size)), spec)
    from tfyard.data.order import positions

    keys = tf.constant([[spec.seed, 0], [spec.seed, 1]], tf.int64)
    images = tf.cast(tf.random.stateless_truncated_normal([POOL, *shape[1:]], seed=keys[0]),
                     spec.dtype)
    labels = tf.random.stateless_uniform([POOL], seed=keys[1], maxval=classes,
                                         dtype=tf.int32)

    def view(ids):
        rows = ids % POOL
        batch = (tf.gather(images, rows), tf.gather(labels, rows))
        return (*batch, ids) if spec.with_ids else batch

    ids = positions(spec, count).map(lambda _, i: i).unbatch()
    batches = ids.batch(spec.batch_size, drop_remainder=spec.training)
    return finish(batches.map(view).prefetch(tf.data.AUTOTUNE), spec)


def scan(name, data_dir, split, decode=False, **_):
    """Nothing is stored, so nothing can be bad."""
    return iter(())
