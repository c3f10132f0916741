"""Random images and labels made on the device once and repeated: input cost ~zero.

For benchmarks that measure the model, not the input pipeline.
"""

from __future__ import annotations

from tfyard.data.formats.tfrecord import IMAGENET_COUNTS

NUM_CLASSES = 1000


def info(name, data_dir=None, cache_dir=None, image_size=None, num_examples=None, **_):
    from tfyard.data import DatasetInfo

    size = image_size or 224
    counts = {s: num_examples or n for s, n in IMAGENET_COUNTS.items()}
    return DatasetInfo(name, NUM_CLASSES, (size, size, 3), counts)


def build(name, data_dir, spec):
    """One batch, repeated. Its content does not depend on position, so any start is a
    resume; in a seeded run it is drawn statelessly and `with_ids` numbers the positions."""
    import tensorflow as tf

    from tfyard.data.pipeline import finish

    size = spec.image_size or 224
    count = spec.num_examples or IMAGENET_COUNTS[spec.split]
    shape = [spec.batch_size, size, size, 3]
    if spec.deterministic:
        keys = tf.constant([[spec.seed, 0], [spec.seed, 1]], tf.int64)
        images = tf.random.stateless_truncated_normal(shape, seed=keys[0])
        labels = tf.random.stateless_uniform([spec.batch_size], seed=keys[1],
                                             maxval=NUM_CLASSES, dtype=tf.int32)
    else:
        images = tf.random.truncated_normal(shape, seed=spec.seed)
        labels = tf.random.uniform([spec.batch_size], maxval=NUM_CLASSES, dtype=tf.int32,
                                   seed=spec.seed)
    dataset = tf.data.Dataset.from_tensors((tf.cast(images, spec.dtype), labels))
    if spec.deterministic and spec.with_ids:
        from tfyard.data.order import positions

        ids = positions(spec, count).unbatch().map(lambda _, i: i)
        batches = ids.batch(spec.batch_size, drop_remainder=True)
        return finish(tf.data.Dataset.zip(dataset.repeat(), batches)
                      .map(lambda pair, i: (*pair, i)), spec)
    return finish(dataset.repeat(None if spec.repeated else max(1, count // spec.batch_size)),
                  spec)
