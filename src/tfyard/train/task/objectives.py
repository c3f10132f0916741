"""What a step optimises and reports, as sums that replicas can add.

An objective turns one per-replica batch `(x, y, sample_weight)` and the model's output into
the per-example loss and a vector of sums `[weighted loss, examples, ...]`. The loop adds the
vectors over replicas and steps, and `results(sums)` turns the totals into the reported
figures. Sums (not means) are what make every strategy agree: an all-reduce, a parameter-
server worker and a resumed run all add the same numbers.

- `Classification`: tfyard's recipe for a model that outputs logits: softmax cross-entropy
  (label smoothing), top-1 and top-5.
- `Compiled`: a model compiled by its user: its own loss (logits or probabilities, as the
  loss says) and its own Keras metrics under their Keras names. A Keras metric's state is
  additive (Keras itself sums it over replicas), so one batch's contribution is its stateless
  update from the reset state, and the total's `stateless_result` is the metric.
"""

from __future__ import annotations

import math
from typing import Protocol

import keras
import tensorflow as tf

LOSS, COUNT = 0, 1  # every objective's sums start [weighted loss, examples]


class Objective(Protocol):
    names: tuple[str, ...]   # the figures `results` reports
    size: int                # the length of the sums vector
    from_logits: bool        # whether the model's outputs are logits (the export's softmax)

    def __call__(self, labels, outputs, weights=None):
        """(per-example loss, sums) of one per-replica batch."""

    def results(self, sums) -> dict[str, float]:
        """The reported figures of summed sums."""


def _weighted_sum(values, weights):
    values = tf.cast(values, tf.float32)
    return tf.reduce_sum(values if weights is None else values * tf.cast(weights, tf.float32))


class Classification:
    """Cross-entropy on logits with label smoothing; loss, top-1 and top-5."""

    names = ("loss", "top1", "top5")
    from_logits = True

    def __init__(self, num_classes: int, label_smoothing: float = 0.0):
        self.num_classes = int(num_classes)
        self.label_smoothing = label_smoothing
        self.size = 4

    def __call__(self, labels, outputs, weights=None):
        """(per-example loss, sums [loss, count, top1, top5])."""
        logits = tf.cast(outputs, tf.float32)
        labels = tf.reshape(labels, [-1])
        targets = tf.one_hot(labels, self.num_classes)
        per_example = keras.losses.categorical_crossentropy(
            targets, logits, from_logits=True, label_smoothing=self.label_smoothing)
        top1 = tf.equal(tf.cast(tf.argmax(logits, -1), labels.dtype), labels)
        top5 = tf.nn.in_top_k(tf.cast(labels, tf.int32), logits, min(5, self.num_classes))
        count = tf.cast(tf.size(labels), tf.float32) if weights is None \
            else tf.reduce_sum(tf.cast(weights, tf.float32))
        sums = tf.stack([_weighted_sum(per_example, weights), count,
                         _weighted_sum(tf.cast(top1, tf.float32), weights),
                         _weighted_sum(tf.cast(top5, tf.float32), weights)])
        return per_example, sums

    def results(self, sums) -> dict[str, float]:
        count = max(float(sums[COUNT]), 1.0)
        return {"loss": float(sums[LOSS]) / count, "top1": float(sums[2]) / count,
                "top5": float(sums[3]) / count}


class Compiled:
    """The loss and metrics a user compiled into their model.

    `loss` is the compiled loss (a `keras.losses.Loss`, or a function `(y_true, y_pred)` of
    per-example values); `metrics` the compiled metric objects, built, by the names Keras
    `fit` reports them under. Sample weights weigh
    the loss and the metrics as Keras `fit` weighs them.
    """

    def __init__(self, loss, metrics: dict):
        self.loss = loss
        self.metrics = list(metrics.values())
        self._shapes = [[tuple(v.shape) for v in m.variables] for m in self.metrics]
        self._dtypes = [[v.dtype for v in m.variables] for m in self.metrics]
        self._sizes = [[math.prod(s) for s in shapes]
                       for shapes in self._shapes]
        self.names = ("loss", *metrics)
        self.size = 2 + sum(sum(sizes) for sizes in self._sizes)
        # a Loss object's config holds its from_logits (a plain function takes probabilities)
        self.from_logits = isinstance(loss, keras.losses.Loss) and bool(
            loss.get_config().get("from_logits", False))

    def _per_example(self, labels, outputs):
        call = self.loss.call if isinstance(self.loss, keras.losses.Loss) else self.loss
        values = tf.cast(call(labels, outputs), tf.float32)
        if values.shape.rank and values.shape.rank > 1:   # per-pixel losses: mean per example
            values = tf.reduce_mean(values, axis=list(range(1, values.shape.rank)))
        return values

    def __call__(self, labels, outputs, weights=None):
        """(per-example loss, sums [loss, count, every metric's state contribution])."""
        outputs = tf.cast(outputs, tf.float32)   # as Keras losses take mixed-precision outputs
        per_example = self._per_example(labels, outputs)
        count = tf.cast(tf.shape(per_example)[0], tf.float32) if weights is None \
            else tf.reduce_sum(tf.cast(weights, tf.float32))
        parts = [tf.reshape(_weighted_sum(per_example, weights), [1]), tf.reshape(count, [1])]
        for metric in self.metrics:
            start = metric.stateless_reset_state()
            kwargs = {} if weights is None else {"sample_weight": weights}
            updated = metric.stateless_update_state(start, labels, outputs, **kwargs)
            parts += [tf.reshape(tf.cast(new, tf.float32) - tf.cast(old, tf.float32), [-1])
                      for new, old in zip(updated, start, strict=True)]
        return per_example, tf.concat(parts, 0)

    def results(self, sums) -> dict[str, float]:
        figures = {"loss": float(sums[LOSS]) / max(float(sums[COUNT]), 1.0)}
        offset = 2
        for name, metric, shapes, dtypes, sizes in zip(self.names[1:], self.metrics,
                                                       self._shapes, self._dtypes, self._sizes,
                                                       strict=True):
            start = metric.stateless_reset_state()
            state = []
            for old, shape, dtype, size in zip(start, shapes, dtypes, sizes, strict=True):
                delta = tf.reshape(tf.constant(sums[offset:offset + size]), shape)
                state.append(tf.cast(tf.cast(old, tf.float32) + delta, dtype))
                offset += size
            value = metric.stateless_result(state)
            if isinstance(value, dict):   # a metric with several figures (F-scores, say)
                figures.update({f"{name}_{k}": _scalar(v) for k, v in value.items()})
            else:
                figures[name] = _scalar(value)
        return figures


def _scalar(value) -> float:
    value = tf.convert_to_tensor(value)
    return float(tf.reduce_mean(tf.cast(value, tf.float32)))
