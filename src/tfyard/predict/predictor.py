"""The predictor: a SavedModel exported by tfyard, loaded once, scoring encoded images.

It reads the SavedModel's graph only (`tf.saved_model.load`): the model function a run.json
names is never imported and nothing is unpickled, so scoring a model someone sent runs none
of their Python. Images are read and decoded in parallel by tf.data with the run's eval
preprocessing (`data.preprocess.eval_image`, its numbers read from the `metadata`
signature), batched, and scored by the `serve` signature in graph mode. An image that
cannot be decoded becomes a row with an `error`; the others go on. `tfyard predict` hands
it files; an engine's workers (Spark, Ray) hand it their own batches of (name, bytes).
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterable, Iterator

import tensorflow as tf

from tfyard.data.preprocess import Preprocessing, eval_image
from tfyard.errors import UserError, plain_op_error
from tfyard.predict.signature import METADATA_ENDPOINT, class_probabilities

# tf.data's autotuner, on 2 cores, now and then settles a pipeline at 2/3 of its rate (188
# against 285 photos/s, `benchmarks/RESULTS.md`); without it the decodes run one per core and
# the batches are prefetched two ahead, steadily.
STEADY = tf.data.Options()
STEADY.autotune.enabled = False

COLUMNS = ("path", "class_id", "class_name", "score", "top_ids", "top_names", "top_scores",
           "error")


class Predictor:
    """Rows for encoded images, from one loaded SavedModel; see the module docstring."""

    def __init__(self, saved_model: str, top_k: int = 5, batch_size: int = 32):
        if top_k < 1 or batch_size < 1:
            raise UserError(f"--top_k and --batch_size must be at least 1, got {top_k} and "
                            f"{batch_size}")
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

    def rows(self, items: Iterable[tuple[str | None, str | bytes]]) -> Iterator[dict]:
        """One row per item, in order; an item is (name, path) or (name, encoded bytes).

        The items are drawn lazily as the pipeline needs them, so memory stays flat in
        their number. A failed decode drops the element from the pipeline (it stays ordered);
        the rows then pair each result with the item it came from and decode each missing
        one again alone to say why."""
        pending = collections.deque()

        def source():
            for index, (name, item) in enumerate(items):
                pending.append((index, name, item))
                is_path = isinstance(item, str | os.PathLike)
                yield (index, os.fsencode(item) if is_path else b"",
                       b"" if is_path else bytes(item))

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
        while pending:
            yield self._failed(*pending.popleft()[1:])

    def _row(self, name, ids, scores) -> dict:
        ids, scores = [int(i) for i in ids], [float(s) for s in scores]
        names = [self.class_names[i] for i in ids]
        return {"path": name, "class_id": ids[0], "class_name": names[0], "score": scores[0],
                "top_ids": ids, "top_names": names, "top_scores": scores, "error": ""}

    def _failed(self, name, item) -> dict:
        return {"path": name, "class_id": None, "class_name": None, "score": None,
                "top_ids": [], "top_names": [], "top_scores": [], "error": self.problem(item)}

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
