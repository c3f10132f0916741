"""The predictor: a SavedModel exported by tfyard, loaded once, scoring encoded images.

It reads the SavedModel's graph only (`tf.saved_model.load`): the model function a run.json
names is never imported and nothing is unpickled, so scoring a model someone sent runs none
of their Python. Images are read and decoded in parallel by tf.data with the run's eval
preprocessing (`data.preprocess.eval_image`, its numbers read from the `metadata`
signature), batched, and scored by the `serve` signature in graph mode. Every item becomes
a row: one that is null, empty, of another type, or a path to nothing, or whose read or decode
fails, a row with an `error`; the others go on. `tfyard predict` hands
it files; an engine's workers (Spark, Ray) hand it their own batches of (name, bytes).
"""

from __future__ import annotations

import collections
import json
import os
import stat
from collections.abc import Iterable, Iterator

import tensorflow as tf

from tfyard.data.preprocess import Preprocessing, eval_image
from tfyard.errors import UserError, plain_op_error
from tfyard.platform import is_remote
from tfyard.predict.rows import failed, scored
from tfyard.predict.signature import METADATA_ENDPOINT, class_probabilities

# tf.data's autotuner, on 2 cores, now and then settles a pipeline at 2/3 of its rate (188
# against 285 photos/s, `benchmarks/RESULTS.md`); without it the decodes run one per core and
# the batches are prefetched two ahead, steadily.
STEADY = tf.data.Options()
STEADY.autotune.enabled = False
EMPTY = "cannot decode: it is empty (0 bytes)"


def unusable(item) -> str | None:
    """Why `item` (a path or encoded bytes) cannot be scored, found without reading it, or
    None: only its read and its decode are left to the pipeline."""
    if item is None:
        return "no image (the cell is null)"
    if isinstance(item, bytes | bytearray | memoryview):
        return None if len(item) else EMPTY
    if not isinstance(item, str):
        return f"not an image: a {type(item).__name__} (give encoded bytes or a path)"
    if not item:
        return "no image (the path is empty)"
    if is_remote(item):
        return None   # a bucket's object: its read says what is wrong
    try:
        status = os.stat(item)
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if stat.S_ISDIR(status.st_mode):
        return "cannot read: it is a folder"
    return None if status.st_size else EMPTY


class Predictor:
    """Rows for encoded images, from one loaded SavedModel; see the module docstring."""

    def __init__(self, saved_model: str, top_k: int = 5, batch_size: int = 32):
        self.model = tf.saved_model.load(saved_model)
        if not hasattr(self.model, METADATA_ENDPOINT):
            raise UserError(f"{saved_model} was exported by a tfyard without prediction "
                            "support (no `metadata` signature); export it again with this "
                            "tfyard")
        metadata = {k: v.numpy() for k, v in getattr(self.model, METADATA_ENDPOINT)().items()}
        self.class_names = [name.decode("utf-8") for name in metadata["class_names"]]
        if not metadata["preprocessing"]:
            raise UserError(f"{saved_model} was trained on the user's own input, whose images "
                            "tfyard does not know how to prepare; call its `serve` signature "
                            "with images prepared as the input function prepared them")
        self.view = Preprocessing.from_dict(json.loads(metadata["preprocessing"]))
        self.dtype = metadata["input_dtype"].decode()
        self.top_k = min(top_k, len(self.class_names))
        self.batch_size = batch_size
        self._score = tf.function(self._top_k, autograph=False, reduce_retracing=True)

    def _top_k(self, images):
        probabilities = class_probabilities(self.model.serve(images)["probabilities"])
        return tf.math.top_k(probabilities, self.top_k)

    def _prepare(self, index, path, data):
        encoded = tf.cond(tf.strings.length(path) > 0, lambda: tf.io.read_file(path),
                          lambda: data)
        return index, eval_image(encoded, self.view, self.dtype)

    def rows(self, items: Iterable[tuple[str | None, object]]) -> Iterator[dict]:
        """One row per item, in order; an item is (name, path) or (name, encoded bytes), and
        anything else (None, empty, another type, a path to nothing) gets a row saying why.

        Everything but reading and decoding is checked here in Python (`unusable`): such an
        item never enters the pipeline, and its row takes its place. The items are drawn
        lazily as the pipeline needs them, so memory stays flat in their number. A failed
        read or decode drops the element from the pipeline (it stays ordered); the rows then
        pair each result with the item it came from and decode each missing one again alone
        to say why. An error of `items` itself is raised, never taken for their end."""
        pending, broken = collections.deque(), []

        def source():
            try:
                for index, (name, item) in enumerate(items):
                    item = os.fspath(item) if isinstance(item, os.PathLike) else item
                    problem = unusable(item)
                    pending.append((index, name, item, problem))
                    if problem is None:
                        is_path = isinstance(item, str)
                        yield (index, os.fsencode(item) if is_path else b"",
                               b"" if is_path else bytes(item))
            except Exception as exc:  # noqa: BLE001 - raised again below, after the rows
                broken.append(exc)

        dataset = tf.data.Dataset.from_generator(source, output_signature=(
            tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.string),
            tf.TensorSpec([], tf.string)))
        dataset = dataset.map(self._prepare, num_parallel_calls=tf.data.AUTOTUNE,
                              deterministic=True).ignore_errors()
        for indices, images in dataset.batch(self.batch_size).prefetch(2).with_options(
                STEADY):
            scores, ids = (t.numpy() for t in self._score(images))
            for index, top_scores, top_ids in zip(indices.numpy(), scores, ids, strict=True):
                while pending[0][0] != index:
                    yield self._failed(*pending.popleft()[1:])
                yield self._row(pending.popleft()[1], top_ids, top_scores)
        if broken:
            raise broken[0]
        while pending:
            yield self._failed(*pending.popleft()[1:])

    def _row(self, name, ids, scores) -> dict:
        ids, scores = [int(i) for i in ids], [float(s) for s in scores]
        return scored(name, ids, [self.class_names[i] for i in ids], scores)

    def _failed(self, name, item, problem: str | None) -> dict:
        return failed(name, problem or self.problem(item))

    def problem(self, item) -> str:
        """Why one image cannot be scored, decoding it again alone (eagerly)."""
        try:
            if isinstance(item, str | os.PathLike):
                with open(item, "rb") as stream:
                    item = stream.read()
            eval_image(tf.constant(item), self.view, self.dtype)
        except OSError as exc:
            return f"cannot read: {exc.strerror or exc}"
        except tf.errors.OpError as exc:
            return f"cannot decode: {plain_op_error(exc)}"
        return "cannot read: it changed while predicting"
