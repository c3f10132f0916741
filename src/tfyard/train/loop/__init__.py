"""The inner loop: a `Trainer` owns the compiled step and runs N steps, returning the metrics.

A `tf.function` runs up to `steps_per_loop` steps per call inside a `tf.while_loop`. An
executor hides how the host drives it (`loop.executors`: called directly, or scheduled on
parameter-server workers). The Trainer writes no files: checkpoints, reports and evaluation
are the Controller's actions; the evaluation itself, distributed over the replicas, is
`loop.evaluation`.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import keras
import tensorflow as tf

from tfyard import compat
from tfyard.data.release import release
from tfyard.train.loop.executors import make_executor, replica_statistics
from tfyard.train.optim import decayed_variables
from tfyard.train.task.objectives import COUNT, LOSS, Objective


@dataclass(frozen=True)
class StepConfig:
    """What the compiled step needs besides the model and optimizer."""

    objective: Objective        # the loss and the reported sums (`train.objectives`)
    global_batch: int | None    # None: the input's batches decide (their size may vary)
    weight_decay: float = 0.0   # L2 on `decayed_variables` as a gradient term (SGD recipe)
    jit_compile: bool = False
    steps_per_loop: int = 10
    # Skip each update whose loss or gradients are not finite (the loss-scale optimizer of
    # float16 already skips on its own gradients; then the skips are only counted).
    skip_nonfinite: bool = False


def unpack(batch):
    """(x, y, sample_weight or None) of a batch in Keras's `(x, y[, w])` convention."""
    return (*batch, None) if len(batch) == 2 else tuple(batch)


def graph_function(fn: Callable, jit_compile: bool = False):
    """`tf.function` without AutoGraph: the step's control flow is written as graph ops
    (`tf.while_loop`, `tf.cond`), so nothing needs rewriting, and every process saves the
    ~1.5 s AutoGraph spent converting the step's functions from source."""
    return tf.function(fn, autograph=False, jit_compile=jit_compile)


class Trainer:
    """Owns the step; `train(n)` runs n steps and returns their averaged metrics.

    `dataset_fn(input_context, start_step)` returns per-replica batches beginning with those
    of step `start_step` (see `_iterator`). With `record_ids` its batches are (images,
    labels, example ids) and `take_example_ids()` returns the ids each step consumed.
    """

    def __init__(self, strategy, model, optimizer, config: StepConfig, dataset_fn: Callable,
                 step: tf.Variable | None = None, executor=None, record_ids: bool = False):
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.config = config
        self.dataset_fn = dataset_fn
        self.step = step if step is not None else tf.Variable(
            0, dtype=tf.int64, trainable=False, name="global_step")
        self.executor = executor or make_executor(strategy)
        decayed = {id(v) for v in decayed_variables(model)} if config.weight_decay else set()
        self._decayed = [i for i, v in enumerate(model.trainable_variables) if id(v) in decayed]
        self._size = config.objective.size  # the objective's sums; the loop adds 4 counters
        # XLA compiles the forward/backward pass, and the update too where no all-reduce
        # sits in it (as Keras fit does); each tf.function is created once, here.
        self._compute, self._update = self._gradients, self._apply
        if config.jit_compile and self.executor.update_in_xla:
            self._update = graph_function(self._apply, jit_compile=True)
        elif config.jit_compile:
            self._compute = graph_function(self._gradients, jit_compile=True)
        self._loop = graph_function(self._train_loop)
        self._sync = graph_function(self._average_statistics)
        # The iterator, once made; released (`tfyard.data.release`) when the trainer goes,
        # so that neither its owner nor a garbage collection waits on its deletion (an
        # exiting process deletes none).
        self._input: list = []
        weakref.finalize(self, _release_all, self._input).atexit = False
        self._ids = IdTap(strategy) if record_ids else None

    # --- the step (graph) ---------------------------------------------------------------

    def _gradients(self, x, y, weights):
        c = self.config
        variables = self.model.trainable_variables
        # Only the trainable weights are watched: the ops of a frozen prefix of the network
        # are not recorded, so no gradient is computed for it or propagated into it.
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch([v.value for v in variables])
            outputs = self.model(x, training=True)
            per_example, sums = c.objective(y, outputs, weights)
            loss = tf.nn.compute_average_loss(per_example, sample_weight=weights,
                                              global_batch_size=c.global_batch)
            if self.model.losses:  # kernel regularizers, add_loss: once per global batch
                penalty = tf.add_n([tf.cast(x, tf.float32) for x in self.model.losses])
                loss += tf.nn.scale_regularization_loss(penalty)
                # reported as Keras reports it: part of every example's loss
                sums = tf.tensor_scatter_nd_add(sums, [[LOSS]], [penalty * sums[COUNT]])
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        if self._decayed:
            # d/dw of scale_regularization_loss(wd * l2_loss(w)) is wd * w / replicas (the
            # all-reduce sums replicas back to wd * w); the loss scale applies to it too.
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            for i in self._decayed:
                decay = self.optimizer.scale_loss(
                    tf.cast(variables[i], grads[i].dtype) * (c.weight_decay / replicas))
                grads[i] = grads[i] + decay
        return grads, sums

    def _apply_gradients(self, grads):
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))

    def _apply(self, x, y, weights=None):
        """One step; returns the objective's sums, [skipped, non-finite], summed over this
        replica. Non-finite means the loss or the gradients: a ReLU turns NaN activations
        into zeros, so NaN weights can leave the loss finite. Under loss scaling, whose
        optimizer skips non-finite gradients itself, only a skipping run counts them."""
        grads, sums = self._compute(x, y, weights)
        scaled = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        checked = [sums[LOSS]] if scaled and not self.config.skip_nonfinite else [
            sums[LOSS], *grads]
        bad = 1.0 - tf.cast(tf.reduce_all([tf.reduce_all(tf.math.is_finite(t))
                                           for t in checked]), tf.float32)
        if not self.config.skip_nonfinite:
            self._apply_gradients(grads)
            return tf.concat([sums, [0.0, bad]], 0)
        if tf.distribute.get_strategy().num_replicas_in_sync > 1:  # every replica agrees
            bad = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, bad)
        skip = bad > 0
        if scaled:
            self._apply_gradients(grads)   # it skips non-finite updates itself
        else:
            _apply_unless(skip, self._apply_gradients, grads)
        return tf.concat([tf.where(skip, tf.zeros_like(sums), sums),
                          [tf.cast(skip, tf.float32), bad]], 0)

    def _replica_step(self, batch):
        return self._update(*unpack(batch))

    def _train_loop(self, iterator, steps):
        """Sums of [the objective's sums..., skipped x replicas, non-finite steps,
        trailing run of skipped steps, the first non-finite step of the call (1-based)],
        then [input wait, loop time] in seconds: timestamps around each `next(iterator)`
        (ordered after the previous step's sums) measure how long the step waited for
        input; they change no value."""
        def step(i, totals, waited):
            with tf.control_dependencies([totals]):
                before = tf.timestamp()
            with tf.control_dependencies([before]):
                batch = next(iterator)
            with tf.control_dependencies(tf.nest.flatten(batch, expand_composites=True)):
                waited += tf.timestamp() - before
            sums = self.strategy.run(self._replica_step, args=(batch,))
            sums = self.strategy.reduce(tf.distribute.ReduceOp.SUM, sums, axis=None)
            k = self._size
            skipped = tf.cast(sums[k] > 0, tf.float32)
            nonfinite = tf.cast(sums[k + 1] > 0, tf.float32) * (1.0 - skipped)
            run = (totals[k + 2] + skipped) * skipped
            first = tf.where((totals[k + 3] == 0) & (nonfinite > 0),
                             tf.cast(i + 1, tf.float32), totals[k + 3])
            totals = tf.concat([totals[:k + 2] + tf.concat([sums[:k + 1], [nonfinite]], 0),
                                [run, first]], 0)
            return i + 1, totals, waited

        started = tf.timestamp()
        start = (tf.constant(0, steps.dtype), tf.zeros([self._size + 4]),
                 tf.constant(0.0, tf.float64))
        _, totals, waited = tf.while_loop(lambda i, *_: i < steps, step, start)
        with tf.control_dependencies([totals, waited]):
            busy = tf.timestamp() - started
        return tf.concat([totals, tf.cast(tf.stack([waited, busy]), tf.float32)], 0)

    def _average_statistics(self):
        """Average non-trainable weights (batch-norm moving statistics) over all replicas.

        Keras 3 creates them with aggregation NONE, so each replica keeps its own; one
        all-reduce before each checkpoint makes every member save and evaluate the same model.
        """
        variables = replica_statistics(self.model)
        local = self.strategy.run(lambda: [tf.identity(v.value) for v in variables])
        for variable, value in zip(variables, local, strict=True):
            variable.assign(self.strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None))

    # --- the host side ------------------------------------------------------------------

    def _iterator(self):
        """A distributed iterator that starts at the batches of the current step.

        Its position cannot go into the checkpoint under any strategy: TensorFlow 2.21's
        DistributedIterator is not trackable (tensorflow#56372). The input is addressed by
        step instead: a seeded `dataset_fn` starts at global example step x global batch
        (`tfyard.data.order`), so a resumed run reads exactly what an unbroken one would.
        """
        if not self._input:
            start = int(self.step.numpy())
            iterator = self.executor.iterator(lambda context: self.dataset_fn(context, start))
            self._input.append(self._ids.wrap(iterator) if self._ids is not None else iterator)
        return self._input[0]

    def take_example_ids(self) -> list[list[int]]:
        """The example ids of each step run since the last call (with `record_ids`)."""
        return self._ids.take() if self._ids is not None else []

    def chunk_steps(self, remaining: int) -> int:
        """How many steps the next chunk should run, at most `remaining`."""
        return self.executor.chunk_steps(self.config.steps_per_loop, remaining)

    def train(self, num_steps: int) -> dict[str, float]:
        """Run `num_steps` steps (fewer when preempted under parameter servers; `step` says how
        many ran); metrics averaged over them, plus lr, images/sec, step time."""
        started = time.perf_counter()
        sums, num_steps = self.executor.run(self._loop, self._iterator(), num_steps,
                                            self.config.steps_per_loop)
        elapsed = max(time.perf_counter() - started, 1e-9)
        self.step.assign_add(num_steps)
        # convert_to_tensor: float() of a constant rate fails on a MirroredVariable.
        lr = float(tf.convert_to_tensor(self.optimizer.learning_rate))
        objective, k = self.config.objective, self._size
        skipped, nonfinite, in_a_row, first, waited, busy = (float(x) for x in sums[k:k + 6])
        figures = objective.results(sums[:k]) if sums[COUNT] \
            else dict.fromkeys(objective.names, float("nan"))
        examples = num_steps * self.config.global_batch if self.config.global_batch \
            else float(sums[COUNT])
        metrics = {**figures, "lr": lr,
                   "images_per_sec": examples / elapsed,
                   "step_time": elapsed / max(num_steps, 1),
                   # Share of the loop's time spent in next(iterator); under the parameter-
                   # server executor, summed over the workers' calls: each worker's share.
                   "input_wait": min(max(waited / busy, 0.0), 1.0) if busy > 0 else 0.0}
        if nonfinite:   # steps whose loss or gradients were not finite (and were not skipped)
            metrics["nonfinite_steps"] = int(nonfinite)
            if num_steps <= self.config.steps_per_loop:   # one call: its first is the chunk's
                metrics["first_nonfinite_step"] = int(self.step.numpy()) - num_steps + int(first)
        if self.config.skip_nonfinite:
            metrics["skipped_steps"] = round(skipped / self.strategy.num_replicas_in_sync)
            metrics["skipped_in_a_row"] = int(in_a_row)
        return metrics

    def synchronize(self) -> None:
        """Make every replica's non-trainable state equal (before a checkpoint or eval)."""
        if self.executor.needs_statistics_sync(self.model):
            self._sync()


class IdTap:
    """Debug: the ids of the examples each step consumed, in replica order, for checks that
    every example is seen once per epoch. It wraps the distributed iterator the compiled loop
    pulls from, so it records what the step used, not what the input prefetched."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.iterator = None
        self._steps: list[list[int]] = []

    def wrap(self, iterator) -> IdTap:
        self.iterator = iterator
        return self

    def __iter__(self):
        return self

    def __next__(self):
        """Traced into the loop: a host-side record of this step's ids, then the batch."""
        *batch, ids = next(self.iterator)
        tf.py_function(self._record, list(self.strategy.experimental_local_results(ids)),
                       Tout=[])
        return tuple(batch)

    def _record(self, *ids) -> None:
        self._steps.append([int(i) for part in ids for i in part.numpy()])

    def take(self) -> list[list[int]]:
        taken, self._steps = self._steps, []
        return taken


def _release_all(iterators: list) -> None:
    while iterators:
        release(iterators.pop())


def _apply_unless(skip, apply, grads) -> None:
    """`apply(grads)` unless `skip`, as Keras' LossScaleOptimizer does it: where the
    optimizer syncs through a merge_call, the cond must sit in the cross-replica context."""
    if compat.supports_no_merge_call():
        tf.cond(skip, lambda: None, lambda: apply(grads))
        return

    def cross_replica(distribution, skip, grads):
        tf.cond(distribution.experimental_local_results(skip)[0], lambda: None,
                lambda: distribution.extended.call_for_each_replica(apply, args=(grads,)))

    tf.distribute.get_replica_context().merge_call(cross_replica, args=(skip, grads))
