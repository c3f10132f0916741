"""TFRecord shards of encoded images: the ImageNet layout and the slim layout.

ImageNet: `train-%05d-of-%05d` / `validation-%05d-of-%05d`, labels 1..N (offset -1).
Slim: `*train*.tfrecord` / `*validation*.tfrecord` plus `labels.txt`, labels 0..N-1.
Both carry `image/encoded` (JPEG or PNG), `image/class/label` and optional bounding boxes.
"""

from __future__ import annotations

import fnmatch
import os
import re

from tfyard.data.formats.base import (
    IMAGENET_EVAL,
    DatasetInfo,
    Record,
    check_label,
    find_files,
    require_dir,
)
from tfyard.data.formats.framing import CHECKSUM, log, record_counts, walk
from tfyard.errors import UserError, plain_op_error
from tfyard.storage import stream

IMAGENET_COUNTS = {"train": 1_281_167, "validation": 50_000}
_PATTERNS = {
    ("imagenet", "train"): ["train-?????-of-?????"],
    ("imagenet", "validation"): ["validation-?????-of-?????"],
    ("tfrecord", "train"): ["*train*.tfrecord"],
    ("tfrecord", "validation"): ["*validation*.tfrecord", "*test*.tfrecord"],
}
_BOX = ("ymin", "xmin", "ymax", "xmax")


def shards(name: str, data_dir: str | None, split: str) -> list[str]:
    data_dir = require_dir(name, data_dir)
    return find_files(data_dir, _PATTERNS[name, split], f"{split} shards for {name}")


def _split_of(name: str, object_name: str) -> str | None:
    """The split whose shard the object `object_name` (under a bucket prefix) is in layout
    `name`; None when it is none."""
    return next((split for (layout, split), patterns in _PATTERNS.items()
                 if layout == name and "/" not in object_name
                 and any(fnmatch.fnmatchcase(object_name, pattern) for pattern in patterns)),
                None)


def streams(name: str, object_name: str) -> bool:
    """Whether the object `object_name` (under a bucket prefix) is a shard of layout `name`."""
    return _split_of(name, object_name) is not None


def held(name: str, sizes: dict[str, int]) -> tuple[int, str]:
    """The most bytes of a streamed set's shards (`sizes`, by object name) that its readers
    hold open at once, and what they are: training reads one shard at a time
    (`data.fetched.interleaved`), evaluation interleaves up to `pipeline.CYCLE` of its own, and
    a run holds both while it evaluates."""
    from tfyard.data.pipeline import CYCLE

    largest = {split: sorted((size for object_name, size in sizes.items()
                              if _split_of(name, object_name) == split), reverse=True)
               for split in ("train", "validation")}
    train, evaluation = largest["train"][:1], largest["validation"][:CYCLE]
    said = [f"{'one' if len(files) == 1 else len(files)} {what} shard{'s' * (len(files) > 1)}"
            for files, what in ((train, "training"), (evaluation, "evaluation")) if files]
    return sum(train) + sum(evaluation), " and ".join(said) + " read at once"


def read_labels(data_dir: str) -> dict[int, str] | None:
    """`labels.txt` as {id: name}, None when absent; malformed lines are a UserError."""
    path = os.path.join(data_dir, "labels.txt")
    if not os.path.exists(path):
        return None
    labels = {}
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            key, sep, text = line.rstrip("\n").partition(":")
            if not sep or not key.strip().lstrip("-").isdecimal():
                raise UserError(f"{path}: line {number} is not 'id:name'; fix labels.txt")
            labels[int(key)] = text
    if not labels:
        raise UserError(f"{path} lists no classes; write one 'id:name' line per class")
    return labels


def classes(name: str, data_dir: str, label_offset: int | None) -> tuple[int, int]:
    """(number of classes, offset added to stored labels) for this layout."""
    labels = read_labels(data_dir)
    if name == "tfrecord" and labels is None:
        raise UserError(f"no labels.txt in {data_dir}; slim-style data needs one 'id:name' "
                        "line per class (or use --dataset imagenet)")
    default_offset = -1 if name == "imagenet" else 0
    return (len(labels) if labels else 1000,
            default_offset if label_offset is None else label_offset)


def class_names(data_dir: str, num_classes: int, offset: int) -> tuple[str, ...] | None:
    """The name of each 0-based class from labels.txt (stored label = class - offset); a
    class it does not name is called by its id. None without labels.txt."""
    labels = read_labels(data_dir)
    if labels is None:
        return None
    return tuple(labels.get(k - offset, str(k)) for k in range(num_classes))


def info(name, data_dir, cache_dir=None, label_offset=None, **_):
    num_classes, offset = classes(name, require_dir(name, data_dir), label_offset)
    counts = {}
    for split in ("train", "validation"):
        files = shards(name, data_dir, split)
        counts[split] = sum(record_counts(files, cache_dir))
        check_names(name, split, files, counts[split])
    return DatasetInfo(name, num_classes, (224, 224, 3), counts, IMAGENET_EVAL,
                       class_names(data_dir, num_classes, offset))


def check_names(name: str, split: str, files: list[str], found: int) -> None:
    """Warn in one line when the shards present disagree with what their names imply."""
    matches = [re.search(r"-of-(\d{5})$", f) for f in files]
    declared = {m.group(1) for m in matches if m}
    if not all(matches) or len(declared) != 1:
        return
    expected = int(declared.pop())
    implied = (IMAGENET_COUNTS[split] if name == "imagenet"
               and expected == {"train": 1024, "validation": 128}[split] else None)
    if implied is not None and found != implied:
        log.warning("tfyard: %s %s: %d of %d shards present hold %s records, not the %s "
                    "their names imply; using %s", name, split, len(files), expected,
                    f"{found:,}", f"{implied:,}", f"{found:,}")
    elif implied is None and len(files) != expected:
        log.warning("tfyard: %s %s: %d of %d shards present (names end -of-%05d); using "
                    "the %s records they hold", name, split, len(files), expected, expected,
                    f"{found:,}")


def _parse(record):
    import tensorflow as tf

    features = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        **{f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32) for k in _BOX},
    }
    parsed = tf.io.parse_single_example(record, features)
    box = tf.stack([parsed[f"image/object/bbox/{k}"].values for k in _BOX], axis=-1)
    return parsed["image/encoded"], parsed["image/class/label"], box[tf.newaxis]


def checked_label(label, num_classes: int, offset: int):
    """0-based int32 label; out of range fails the record (dropped by --skip_corrupt)."""
    import tensorflow as tf

    label = tf.cast(label, tf.int32) + offset
    check = tf.debugging.assert_equal(
        tf.logical_and(label >= 0, label < num_classes), True,
        message=f"label outside 0..{num_classes - 1} (label_offset {offset})")
    with tf.control_dependencies([check]):
        return tf.identity(label)


def read(files: list[str], num_classes: int, offset: int, spec, train_view, eval_view,
         cache_dir: str | None = None):
    """Shards -> batches; `*_view(encoded, boxes, seed=None)` turns one record into a float
    image (`seed`: the example's stateless seed in a seeded run)."""
    import tensorflow as tf

    from tfyard.data.fetched import reading
    from tfyard.data.order import shard_stream
    from tfyard.data.pipeline import addressed, assemble

    view = train_view if spec.training else eval_view

    def decode(record, seed=None):
        encoded, label, boxes = _parse(record)
        return view(encoded, boxes, seed=seed), checked_label(label, num_classes, offset)

    def open_file(path):
        records = tf.data.TFRecordDataset(path, buffer_size=8 << 20)
        # a truncated tail would end a seeded window early; counts stop before it too
        return records.ignore_errors() if spec.skip_corrupt else records

    open_file, announce = reading(files, open_file)
    if spec.deterministic:
        counts = record_counts(files, cache_dir, strict=not spec.skip_corrupt)
        return addressed(shard_stream(files, counts, spec, open_file, announce=announce),
                         decode, spec)
    return assemble(tf.data.Dataset.from_tensor_slices(files), decode, spec,
                    open_file=open_file, num_files=len(files), announce=announce)


def build(name, data_dir, spec):
    import tfyard.data.preprocess as pp

    files = shards(name, data_dir, spec.split)
    num_classes, offset = classes(name, data_dir, spec.label_offset)
    view = IMAGENET_EVAL.resized(spec.image_size)

    def train_view(encoded, boxes, seed=None):
        return pp.normalise(pp.inception_crop(encoded, view.size, boxes, seed=seed),
                            view.stats, spec.dtype)

    def eval_view(encoded, _, seed=None):
        return pp.eval_image(encoded, view, spec.dtype)

    return read(files, num_classes, offset, spec, train_view, eval_view, spec.cache_dir)


def scan_files(files: list[str], num_classes: int, offset: int, decode: bool):
    """Every record of `files`: label check, image size, and with `decode` a full decode.

    Each file gets a parallel graph-mode pass first; only a file in which some record fails
    it is read again record by record, to say which record and why. Verifying ImageNet so
    takes the time of one input-pipeline epoch, not of a Python loop over 1.28 M images.
    Shards in a bucket's cache are fetched ahead in this order and held while scanned.
    """
    stream.announce(files)
    for path in files:
        with stream.held(path):
            facts = _fast_scan(path, decode)
            if facts is None:
                yield from _slow_scan(path, num_classes, offset, decode)
            else:
                for index, (label, height, width) in enumerate(facts):
                    label = int(label) + offset
                    yield Record(path, index, label, (int(height), int(width)),
                                 check_label(label, num_classes))
            count, problem = walk(path)  # TensorFlow ends quietly inside a truncated header
            if problem:
                yield Record(path, count, problem=problem)


def _fast_scan(path: str, decode: bool):
    """(label, height, width) rows for every record of `path`, or None if one fails."""
    import numpy as np
    import tensorflow as tf

    from tfyard.data.release import drained

    def facts(record):
        encoded, label, _ = _parse(record)
        shape = _image_shape(encoded, decode)
        return tf.concat([[label], tf.cast(shape[:2], tf.int64)], axis=0)

    records = tf.data.TFRecordDataset(path, buffer_size=8 << 20)
    try:  # reading alone is cheap, and only it tells a truncated file from a bad image
        count = int(records.reduce(np.int64(0), lambda n, _: n + 1))
    except tf.errors.OpError:
        return None  # unreadable or truncated
    rows = records.map(facts, num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()
    rows = np.concatenate([np.zeros((0, 3), np.int64),
                           *(batch.numpy() for batch in drained(rows.batch(4096)))])
    return rows if len(rows) == count else None


def _slow_scan(path: str, num_classes: int, offset: int, decode: bool):
    import tensorflow as tf

    good = 0
    try:
        for record in tf.data.TFRecordDataset(path):
            yield _scan_record(path, good, record, num_classes, offset, decode)
            good += 1
    except tf.errors.OpError:
        count, problem = walk(path)
        if problem is None or count > good:  # a truncation is reported by `scan_files`
            yield Record(path, good, problem=CHECKSUM)


def _image_shape(encoded, decode: bool):
    """(height, width, channels): a full decode, or with `decode` off the JPEG header alone."""
    import tensorflow as tf

    def decoded():
        return tf.shape(tf.io.decode_image(encoded, expand_animations=False))

    if decode:
        return decoded()
    return tf.cond(tf.io.is_jpeg(encoded), lambda: tf.io.extract_jpeg_shape(encoded), decoded)


def _scan_record(path, index, record, num_classes, offset, decode) -> Record:
    import tensorflow as tf

    try:
        encoded, label, _ = _parse(record)
        label = int(label) + offset
        shape = _image_shape(encoded, decode)
    except tf.errors.OpError as exc:
        return Record(path, index, problem=f"cannot decode: {plain_op_error(exc)}")
    size = (int(shape[0]), int(shape[1]))
    return Record(path, index, label, size, check_label(label, num_classes))


def scan(name, data_dir, split, decode=False, label_offset=None, **_):
    num_classes, offset = classes(name, require_dir(name, data_dir), label_offset)
    return scan_files(shards(name, data_dir, split), num_classes, offset, decode)
