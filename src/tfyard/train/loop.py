"""One custom training loop for every strategy.

A `tf.function` runs `steps_per_loop` steps per call inside a `tf.while_loop`. Under
OneDevice, Mirrored and MultiWorkerMirrored strategies the host calls it directly; under
ParameterServerStrategy the same function is scheduled on workers through the
ClusterCoordinator (asynchronous updates). Keras 3 `fit` can run neither of the last two.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import keras
import tensorflow as tf

from tfyard.train.checkpoint import Checkpoints
from tfyard.train.options import Resolved
from tfyard.train.report import Reporter

METRICS = ("loss", "top1", "top5")


@dataclass
class LoopSetup:
    """What the loop needs besides the model and optimizer."""

    strategy: tf.distribute.Strategy
    numbers: Resolved
    num_classes: int
    label_smoothing: float
    l2_decay: float              # 0 when the optimizer decays weights itself (AdamW)
    jit_compile: bool
    steps_per_loop: int
    checkpoint_every_steps: int | None
    eval_every_steps: int | None
    train_dataset_fn: Callable   # (InputContext, seed) -> tf.data.Dataset, per-replica batches
    evaluate: Callable | None    # () -> {"loss", "top1", "top5"}, run by the coordinator only


def batch_metrics(logits, labels, num_classes: int, label_smoothing: float = 0.0):
    """Per-example loss and the sums [loss, top1, top5, count] of one batch."""
    logits = tf.cast(logits, tf.float32)
    targets = tf.one_hot(labels, num_classes)
    per_example = keras.losses.categorical_crossentropy(
        targets, logits, from_logits=True, label_smoothing=label_smoothing)
    top1 = tf.cast(tf.equal(tf.cast(tf.argmax(logits, -1), labels.dtype), labels), tf.float32)
    top5 = tf.cast(tf.nn.in_top_k(labels, logits, min(5, num_classes)), tf.float32)
    sums = tf.stack([tf.reduce_sum(per_example), tf.reduce_sum(top1), tf.reduce_sum(top5),
                     tf.cast(tf.size(labels), tf.float32)])
    return per_example, sums


def averages(sums) -> dict[str, float]:
    loss, top1, top5, count = (float(x) for x in sums)
    count = max(count, 1.0)
    return {"loss": loss / count, "top1": top1 / count, "top5": top5 / count}


class Trainer:
    """Runs training from the current step to `numbers.total_steps`, with reports,
    checkpoints and evaluations at their boundaries."""

    def __init__(self, setup: LoopSetup, model, optimizer, step: tf.Variable,
                 checkpoints: Checkpoints, reporter: Reporter, coordinator=None):
        self.setup = setup
        self.model = model
        self.optimizer = optimizer
        self.step = step
        self.checkpoints = checkpoints
        self.reporter = reporter
        self.coordinator = coordinator
        self.last_eval: dict | None = None
        self.last_train: dict | None = None
        self.images_per_sec: list[float] = []
        self._loop = tf.function(self._train_loop)
        self._sync = tf.function(self._average_statistics)

    # --- the step -----------------------------------------------------------------------

    def _gradients(self, images, labels):
        s = self.setup
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            per_example, sums = batch_metrics(logits, labels, s.num_classes, s.label_smoothing)
            loss = tf.nn.compute_average_loss(per_example,
                                              global_batch_size=s.numbers.global_batch)
            if s.l2_decay:
                kernels = [v for v in self.model.trainable_variables if "kernel" in v.path]
                l2 = tf.add_n([tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in kernels])
                loss += tf.nn.scale_regularization_loss(s.l2_decay * l2)
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.model.trainable_variables)
        return grads, sums

    def _replica_step(self, batch):
        images, labels = batch
        compute = self._gradients
        if self.setup.jit_compile:
            compute = tf.function(compute, jit_compile=True)
        grads, sums = compute(images, labels)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
        return sums

    def _train_loop(self, iterator, steps):
        strategy = self.setup.strategy
        totals = tf.zeros([4])
        for _ in tf.range(steps):
            sums = strategy.run(self._replica_step, args=(next(iterator),))
            totals += strategy.reduce(tf.distribute.ReduceOp.SUM, sums, axis=None)
        return totals

    def _average_statistics(self):
        """Average non-trainable weights (batch-norm moving statistics) over all replicas.

        Keras 3 creates them with aggregation NONE, so each replica keeps its own; one
        all-reduce at each checkpoint makes every member save and evaluate the same model.
        """
        strategy = self.setup.strategy
        variables = self.model.non_trainable_variables
        local = strategy.run(lambda: [tf.identity(v.value) for v in variables])
        for variable, value in zip(variables, local, strict=True):
            variable.assign(strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None))

    # --- the host side ------------------------------------------------------------------

    def _iterator(self, seed_offset: int):
        """A fresh distributed iterator whose shuffle seed moves with the resume step.

        Its position cannot go into the checkpoint under any strategy: TensorFlow 2.21's
        DistributedIterator is not trackable (tensorflow#56372), and the augmentations'
        random ops make SerializeIterator refuse even a plain one. Re-seeding by step
        means a resumed run draws a new order instead of replaying the old one.
        """
        s = self.setup
        strategy = s.strategy

        def dataset_fn(context):
            return s.train_dataset_fn(context, seed_offset)

        if self.coordinator is None:
            return iter(strategy.distribute_datasets_from_function(dataset_fn))
        per_worker = self.coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(dataset_fn))
        return iter(per_worker)

    def _boundaries(self, step: int) -> int:
        """The next step at which something must happen (checkpoint, eval, epoch end)."""
        s = self.setup
        candidates = [s.numbers.total_steps, _next_multiple(step, s.numbers.steps_per_epoch)]
        for every in (s.checkpoint_every_steps, s.eval_every_steps):
            if every:
                candidates.append(_next_multiple(step, every))
        return min(candidates)

    def _run_chunk(self, iterator, steps: int):
        """Run `steps` steps; returns the summed metrics."""
        per_call = self.setup.steps_per_loop
        if self.coordinator is None:
            totals = None
            while steps > 0:
                n = min(per_call, steps)
                result = self._loop(iterator, tf.constant(n))
                totals = result if totals is None else totals + result
                steps -= n
            return totals.numpy()
        futures = []
        while steps > 0:
            n = min(per_call, steps)
            futures.append(self.coordinator.schedule(self._loop, args=(iterator, tf.constant(n))))
            steps -= n
        self.coordinator.join()
        return sum(f.fetch() for f in futures)

    def train(self, on_first_chunk: Callable[[], None] = lambda: None) -> None:
        """Train to the last step; `on_first_chunk` runs once the cluster has done real work."""
        s = self.setup
        total = s.numbers.total_steps
        step = int(self.step.numpy())
        iterator = self._iterator(seed_offset=step)
        while step < total:
            target = self._boundaries(step)
            while step < target:
                n = target - step if self.coordinator else min(s.steps_per_loop, target - step)
                started = time.perf_counter()
                sums = self._run_chunk(iterator, n)
                elapsed = time.perf_counter() - started
                on_first_chunk()
                step += n
                self.step.assign(step)
                rate = n * s.numbers.global_batch / max(elapsed, 1e-9)
                self.images_per_sec.append(rate)
                self.last_train = averages(sums)
                lr = float(self.optimizer.learning_rate)
                self.reporter.report(step, {**self.last_train, "lr": lr,
                                            "images_per_sec": rate,
                                            "step_time": elapsed / n})
            self._at_boundary(step)

    def _at_boundary(self, step: int) -> None:
        s = self.setup
        if self.coordinator is None and s.strategy.num_replicas_in_sync > 1 \
                and self.model.non_trainable_variables:
            self._sync()
        total = s.numbers.total_steps
        if step == total or step % s.numbers.steps_per_epoch == 0 or (
                s.checkpoint_every_steps and step % s.checkpoint_every_steps == 0):
            self.checkpoints.save(step)
        due = s.eval_every_steps and step % s.eval_every_steps == 0
        if s.evaluate is not None and (step == total or due):
            self.last_eval = s.evaluate()
            self.reporter.report(step, self.last_eval, kind="eval")


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every


def evaluate_model(model, dataset, num_classes: int) -> dict[str, float]:
    """Loss, top-1 and top-5 of `model` over a finite dataset, computed on this host."""

    @tf.function
    def eval_batch(images, labels):
        _, sums = batch_metrics(model(images, training=False), labels, num_classes)
        return sums

    totals = tf.zeros([4])
    for images, labels in dataset:
        totals += eval_batch(images, labels)
    return averages(totals.numpy())
