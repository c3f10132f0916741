"""scikit-learn's bundled handwritten digits, upscaled to 32x32: the offline demo dataset.

Written once to `<cache_dir>/digits/` as slim-style TFRecords (lossless PNG) plus
labels.txt, put in place whole (`tfyard.replace`), and read by the TFRecord reader with
mild augmentation (small pad-crop, no mirror: a flipped digit is another symbol).
"""

from __future__ import annotations

import functools
import os

import tfyard.data.formats.tfrecord as tfrecord
from tfyard.data.formats.base import DatasetInfo, Preprocessing
from tfyard.data.formats.framing import record_counts
from tfyard.errors import UserError
from tfyard.replace import replacing_directory

SIZE = 32
VALIDATION = 300
STATS = ((78.64,) * 3, (88.93,) * 3)  # of the upscaled training pixels, 0..255 scale
EVAL = Preprocessing(SIZE, 3, *STATS)


def default_cache() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "tfyard")


def materialise(cache_dir: str | None = None) -> str:
    """The digits directory under `cache_dir`, written on first use."""
    parent = cache_dir or default_cache()
    root = os.path.join(parent, "digits")
    if os.path.exists(os.path.join(root, "labels.txt")):
        return root
    import numpy as np
    from PIL import Image

    from tfyard.data.convert import Item, write_shard, write_text

    os.makedirs(parent, exist_ok=True)
    images, labels = _bundled()
    pixels = [np.asarray(Image.fromarray((image * 255 / 16).astype(np.uint8))
                         .resize((SIZE, SIZE), Image.BICUBIC)) for image in images]
    order = np.random.RandomState(0).permutation(len(pixels))
    parts = {"validation": order[:VALIDATION], "train": order[VALIDATION:]}
    with replacing_directory(root) as staging:   # a racing writer's set is the same bytes
        os.mkdir(staging)
        for split, indices in parts.items():
            write_shard(os.path.join(staging, f"digits_{split}_00000-of-00001.tfrecord"),
                        [Item(int(labels[i]), str(labels[i]), pixels=pixels[i])
                         for i in indices])
        write_text(os.path.join(staging, "labels.txt"), "".join(f"{d}:{d}\n" for d in range(10)))
    return root


def _bundled():
    """The 1,797 8x8 images (0..16) and their labels, read from the file scikit-learn ships,
    as `sklearn.datasets.load_digits` reads it, without importing scikit-learn: that import
    (SciPy, pandas) costs a fresh `tfyard train` about 2 s of CPU."""
    import gzip
    import importlib.util

    import numpy as np

    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise UserError("the digits dataset is scikit-learn's: pip install scikit-learn")
    path = os.path.join(spec.submodule_search_locations[0], "datasets", "data",
                        "digits.csv.gz")
    with gzip.open(path, "rt") as rows:
        table = np.loadtxt(rows, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(int)


def info(name, data_dir=None, cache_dir=None, **_):
    root = materialise(cache_dir)
    counts = {split: sum(record_counts(tfrecord.shards("tfrecord", root, split), cache_dir))
              for split in ("train", "validation")}
    return DatasetInfo(name, 10, (SIZE, SIZE, 3), counts, EVAL,
                       tuple(tfrecord.class_names(root, 10, 0)))


def build(name, data_dir, spec):
    import tensorflow as tf

    import tfyard.data.preprocess as pp

    root = materialise(spec.cache_dir)
    evaluation = EVAL.resized(spec.image_size)

    def view(augment, encoded, _, seed=None):
        image = tf.ensure_shape(tf.io.decode_png(encoded, channels=3), [SIZE, SIZE, 3])
        if not augment:
            return pp.eval_image(image, evaluation, spec.dtype)
        image = pp.pad_crop(image, 2, flip=False, seed=seed)
        image = pp.resize(tf.cast(image, tf.float32), spec.image_size)
        return pp.normalise(image, STATS, spec.dtype)

    return tfrecord.read(tfrecord.shards("tfrecord", root, spec.split), 10, 0, spec,
                         functools.partial(view, True), functools.partial(view, False),
                         cache_dir=spec.cache_dir)


def scan(name, data_dir, split, decode=False, cache_dir=None, **_):
    root = materialise(cache_dir)
    return tfrecord.scan_files(tfrecord.shards("tfrecord", root, split), 10, 0, decode)
