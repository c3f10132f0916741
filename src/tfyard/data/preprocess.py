"""Image transforms shared by the readers: crops, flips, normalisation, output dtype.

Training crops read only the pixels they keep: JPEG goes through the fused
`decode_and_crop_jpeg`, other formats (PNG) decode fully and slice the same window.
"""

from __future__ import annotations

import tensorflow as tf

# Per-channel statistics on the 0..255 scale, so normalised images are ~N(0, 1).
IMAGENET_STATS = ((123.68, 116.78, 103.94), (58.40, 57.12, 57.38))
CIFAR_STATS = ((125.3, 123.0, 113.9), (63.0, 62.1, 66.7))
MNIST_STATS = ((33.32,), (78.57,))


def normalise(image, stats, dtype: str):
    """Scale uint8 pixels to zero mean, unit variance per channel, then cast to `dtype`."""
    mean, std = stats
    image = (tf.cast(image, tf.float32) - mean) / std
    return tf.cast(image, dtype)


def _decode_window(encoded, window_of, channels: int):
    """Decode only the window `window_of(shape)` = [y, x, h, w] picks from the image."""

    def jpeg():
        window = window_of(tf.io.extract_jpeg_shape(encoded))
        return tf.io.decode_and_crop_jpeg(encoded, window, channels=channels)

    def other():
        image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
        window = window_of(tf.shape(image))
        return tf.slice(image, [window[0], window[1], 0], [window[2], window[3], channels])

    return tf.cond(tf.io.is_jpeg(encoded), jpeg, other)


def sub_seed(seed, which: int):
    """The stateless seed of one random choice of an example (None: stateful ops)."""
    return None if seed is None else tf.random.experimental.stateless_fold_in(seed, which)


def flip_left_right(image, seed=None):
    """A random mirror: stateless from `seed` when given, else the fast stateful op."""
    if seed is None:
        return tf.image.random_flip_left_right(image)
    return tf.image.stateless_random_flip_left_right(image, sub_seed(seed, 2))


def inception_crop(encoded, size: int, bbox=None, flip: bool = True, channels: int = 3,
                   seed=None):
    """Training view: a random crop (8-100% of the area, aspect 3/4-4/3) around the boxes.

    With `seed` (int64 [2]) every choice is stateless, so the view is a function of it.
    """
    if bbox is None:
        bbox = tf.zeros([1, 0, 4], tf.float32)
    options = dict(min_object_covered=0.1, aspect_ratio_range=(0.75, 4 / 3),
                   area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True)

    def window_of(shape):
        if seed is None:
            begin, crop, _ = tf.image.sample_distorted_bounding_box(shape, bbox, **options)
        else:
            begin, crop, _ = tf.image.stateless_sample_distorted_bounding_box(
                shape, bbox, seed=sub_seed(seed, 1), **options)
        return tf.stack([begin[0], begin[1], crop[0], crop[1]])

    image = _decode_window(encoded, window_of, channels)
    if flip:
        image = flip_left_right(image, seed)
    return tf.image.resize(image, [size, size], method="bilinear")


def central_crop(encoded, size: int, fraction: float = 0.875, channels: int = 3):
    """Evaluation view: the central square holding `fraction` of the short side, resized."""

    def window_of(shape):
        side = tf.cast(fraction * tf.cast(tf.minimum(shape[0], shape[1]), tf.float32), tf.int32)
        side = tf.maximum(side, 1)
        return tf.stack([(shape[0] - side) // 2, (shape[1] - side) // 2, side, side])

    image = _decode_window(encoded, window_of, channels)
    return tf.image.resize(image, [size, size], method="bilinear")


def pad_crop(image, pad: int, flip: bool, seed=None):
    """CIFAR-style augmentation: zero-pad, random crop back to size, optional mirror;
    stateless from `seed` when given."""
    height, width, channels = image.shape
    image = tf.image.resize_with_crop_or_pad(image, height + 2 * pad, width + 2 * pad)
    if seed is None:
        image = tf.image.random_crop(image, [height, width, channels])
    else:
        image = tf.image.stateless_random_crop(image, [height, width, channels],
                                               sub_seed(seed, 1))
    return flip_left_right(image, seed) if flip else image


def resize(image, size: int | None):
    """Resize to a square `size` unless the image already has it (or no size is asked)."""
    if size is None or tuple(image.shape[:2]) == (size, size):
        return image
    return tf.image.resize(image, [size, size], method="bilinear")
