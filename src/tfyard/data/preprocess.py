"""Image transforms shared by the readers: crops, flips, normalisation, output dtype.

Training crops read only the pixels they keep: JPEG goes through the fused
`decode_and_crop_jpeg`, other formats (PNG, BMP, GIF's first frame: what an image folder
holds) decode fully as 3 channels and slice the same window.
`eval_image` is the one evaluation view, which `tfyard predict` and the SavedModel's
image-bytes signature call too.
"""

from __future__ import annotations

import tensorflow as tf

from tfyard.data.formats.base import (  # noqa: F401 - the readers' names for them
    CIFAR_STATS,
    IMAGENET_STATS,
    MNIST_STATS,
    Preprocessing,
)


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


# The scales 1/r at which libjpeg decodes directly, at a fraction of the full decode's cost.
JPEG_RATIOS = (1, 2, 4, 8)


def central_window(height, width, crop: float):
    """[y, x, side, side] of the central square holding `crop` of the short side."""
    side = tf.cast(crop * tf.cast(tf.minimum(height, width), tf.float32), tf.int32)
    side = tf.maximum(side, 1)
    return tf.stack([(height - side) // 2, (width - side) // 2, side, side])


def to_channels(image, channels: int):
    """Pixels with 1 (grey), 2 (grey, alpha), 3 (RGB) or 4 (RGBA) channels as `channels`."""
    def colour():
        return tf.image.rgb_to_grayscale(image[..., :3]) if channels == 1 else image[..., :3]

    def grey():
        return tf.tile(image[..., :1], [1, 1, channels])

    if image.shape[-1] is not None:   # known when tracing: no branch to build
        return colour() if image.shape[-1] >= 3 else grey()
    return tf.cond(tf.shape(image)[-1] >= 3, colour, grey)


def jpeg_scale(shape, view: Preprocessing):
    """(index into JPEG_RATIOS, the central window at each ratio) for a JPEG of `shape`
    ([H, W, ...] from its header): the most reduced scale whose window still has `view.size`
    pixels a side (a 1024x768 photo for 224 px: 1/2). The image's own size decides it, so
    every caller of `eval_image` decodes an image alike."""
    windows = [central_window(-(-shape[0] // r), -(-shape[1] // r), view.crop)
               for r in JPEG_RATIOS]
    big_enough = tf.stack([window[2] for window in windows]) >= view.size
    return tf.maximum(tf.reduce_sum(tf.cast(big_enough, tf.int32)) - 1, 0), windows


def _jpeg_window(encoded, view: Preprocessing):
    """The central window of a JPEG, decoded at `jpeg_scale` (libjpeg scales while it
    decodes); CMYK is converted to RGB by the decoder."""
    which, windows = jpeg_scale(tf.io.extract_jpeg_shape(encoded), view)

    def decode(index):
        return lambda: tf.io.decode_and_crop_jpeg(encoded, windows[index], channels=3,
                                                  ratio=JPEG_RATIOS[index])

    image = tf.switch_case(which, [decode(i) for i in range(len(JPEG_RATIOS))])
    return to_channels(image, view.channels)


def _pixels_window(image, view: Preprocessing):
    image = to_channels(image, view.channels)
    shape = tf.shape(image)
    y, x, side, _ = tf.unstack(central_window(shape[0], shape[1], view.crop))
    return image[y:y + side, x:x + side]


def eval_image(image, view: Preprocessing, dtype: str = "float32"):
    """THE evaluation view of one image, shared by evaluation, `tfyard predict` and the
    serving signature so their numbers agree: the central crop, resized to a square of
    `view.size`, normalised. `image` is encoded bytes (a scalar string: JPEG, PNG, BMP, or
    GIF's first frame, of any size and colour mode) or decoded pixels [H, W, C]."""
    if image.dtype == tf.string:
        window = tf.cond(tf.io.is_jpeg(image), lambda: _jpeg_window(image, view),
                         lambda: _pixels_window(
                             tf.io.decode_image(image, expand_animations=False), view))
    else:
        window = _pixels_window(image, view)
    resized = tf.image.resize(window, [view.size, view.size], method="bilinear")
    return normalise(resized, (view.mean, view.std), dtype)


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
