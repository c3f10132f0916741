"""Random images and labels made on the device once and repeated: input cost ~zero.

For benchmarks that measure the model, not the input pipeline.
"""

from __future__ import annotations

from tfyard.data.formats.base import DatasetInfo
from tfyard.data.formats.tfrecord import IMAGENET_COUNTS

NUM_CLASSES = 1000
POOL = 32  # distinct images of a seeded run


def info(name, data_dir=None, cache_dir=None, image_size=None, num_examples=None, **_):
    size = image_size or 224
    counts = {s: num_examples or n for s, n in IMAGENET_COUNTS.items()}
    return DatasetInfo(name, NUM_CLASSES, (size, size, 3), counts)


def build(name, data_dir, spec):
    """One batch, repeated. In a seeded run a pool of POOL images is drawn statelessly and
    example k is row k mod POOL, so the content too is a function of position whatever the
    batch size (one gather a batch)."""
    import tensorflow as tf

    from tfyard.data.pipeline import finish

    size = spec.image_size or 224
    count = spec.num_examples or IMAGENET_COUNTS[spec.split]
    shape = [spec.batch_size, size, size, 3]
    if not spec.deterministic:
        images = tf.random.truncated_normal(shape, seed=spec.seed)
        labels = tf.random.uniform([spec.batch_size], maxval=NUM_CLASSES, dtype=tf.int32,
                                   seed=spec.seed)
        dataset = tf.data.Dataset.from_tensors((tf.cast(images, spec.dtype), labels))
        return finish(dataset.repeat(None if spec.repeated
                                     else max(1, count // spec.batch_size)), spec)
    from tfyard.data.order import positions

    keys = tf.constant([[spec.seed, 0], [spec.seed, 1]], tf.int64)
    images = tf.cast(tf.random.stateless_truncated_normal([POOL, *shape[1:]], seed=keys[0]),
                     spec.dtype)
    labels = tf.random.stateless_uniform([POOL], seed=keys[1], maxval=NUM_CLASSES,
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
