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
    import tensorflow as tf

    from tfyard.data.pipeline import finish

    size = spec.image_size or 224
    count = spec.num_examples or IMAGENET_COUNTS[spec.split]
    images = tf.random.truncated_normal([spec.batch_size, size, size, 3], seed=spec.seed)
    labels = tf.random.uniform([spec.batch_size], maxval=NUM_CLASSES, dtype=tf.int32,
                               seed=spec.seed)
    dataset = tf.data.Dataset.from_tensors((tf.cast(images, spec.dtype), labels))
    return finish(dataset.repeat(None if spec.repeated else max(1, count // spec.batch_size)),
                  spec)
