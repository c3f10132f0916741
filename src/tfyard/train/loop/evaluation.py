"""An evaluation of the trained model distributed over the replicas, for the loop's
evaluation action and for the evaluator side-car and `tfyard evaluate`: the objective's sums
over a finite input, its step traced once however often a run evaluates.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tfyard.data.release import drained
from tfyard.train.loop import unpack
from tfyard.train.task.objectives import Objective


def model_evaluation(model, objective: Objective, strategy: tf.distribute.Strategy | None = None
                     ) -> Callable[[Callable], dict[str, float]]:
    """`evaluate(dataset_fn)`: the objective's figures of `model` over the finite input
    `dataset_fn(context)`, its step traced once for every call (a step made anew each call
    would be traced again at every evaluation: ~0.5 s of a small model's every one).

    Under Mirrored and MultiWorkerMirrored every replica evaluates its share and the sums
    are added (every member must call this together); the parameter-server coordinator and
    the evaluator side-car evaluate on this host. An uneven last step is fine: replicas
    without data get empty batches and add nothing."""
    local = strategy is None or isinstance(
        strategy, tf.distribute.experimental.ParameterServerStrategy)
    strategy = tf.distribute.get_strategy() if local else strategy

    def replica_sums(batch):
        x, y, weights = unpack(batch)
        return tf.cond(tf.shape(tf.nest.flatten(x)[0])[0] > 0,   # no model call on nothing
                       lambda: objective(y, model(x, training=False), weights)[1],
                       lambda: tf.zeros([objective.size]))

    def eval_step(batch):
        sums = strategy.run(replica_sums, args=(batch,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, sums, axis=None)

    # One trace for every batch size (the last, partial, and empty ones included): a batch
    # dimension known to be 0 trips some layers' shape inference.
    step = tf.function(replica_sums if local else eval_step, autograph=False,
                       reduce_retracing=True)

    def evaluate(dataset_fn: Callable) -> dict[str, float]:
        if local:
            batches = dataset_fn(tf.distribute.InputContext())
        else:   # batches of any size, so that a last step short of batches is not dropped
            batches = strategy.distribute_datasets_from_function(
                lambda context: dataset_fn(context).map(_any_batch_size))
        totals = np.zeros([objective.size], np.float32)
        for batch in drained(batches):
            totals += step(batch).numpy()
        return objective.results(totals)

    return evaluate


def _any_batch_size(*element):
    """`element` with its batch dimension unknown, values unchanged. TensorFlow 2.21 hands
    the replicas without data empty batches only where the batch shape is not static; with a
    static one (`drop_remainder=True`) it drops a last step that has fewer batches than
    replicas, and those examples go unevaluated."""
    def relax(value):
        if not isinstance(value, tf.Tensor) or not value.shape.rank:
            return value
        return tf.compat.v1.placeholder_with_default(value, [None, *value.shape[1:]])

    return tf.nest.map_structure(relax, element if len(element) > 1 else element[0])
