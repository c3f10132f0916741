"""How the host drives the compiled step under each strategy: `SyncExecutor` calls it
directly (OneDevice, Mirrored, MultiWorkerMirrored); `CoordinatorExecutor` schedules it on
parameter-server workers through a ClusterCoordinator (asynchronous updates), which Keras 3
`fit` cannot do. Also which replica statistics need averaging. The `Trainer` picks one with
`make_executor` and never asks which strategy it runs under.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tfyard import compat
from tfyard.train.outside import preemption


class SyncExecutor:
    """Synchronous strategies: the host calls the loop function once per `steps_per_loop`."""

    def __init__(self, strategy: tf.distribute.Strategy):
        self.strategy = strategy

    def iterator(self, dataset_fn: Callable):
        return iter(self.strategy.distribute_datasets_from_function(dataset_fn))

    def chunk_steps(self, steps_per_loop: int, remaining: int) -> int:
        """Steps per chunk: one call, so every call is reported."""
        return min(steps_per_loop, remaining)

    def run(self, loop_fn, iterator, steps: int, steps_per_loop: int) -> tuple[np.ndarray, int]:
        """(metric sums, steps run)."""
        totals, done = 0.0, 0
        while done < steps:
            n = min(steps_per_loop, steps - done)
            totals = totals + loop_fn(iterator, tf.constant(n)).numpy()
            done += n
        return totals, done

    def needs_statistics_sync(self, model) -> bool:
        return self.strategy.num_replicas_in_sync > 1 and bool(replica_statistics(model))

    @property
    def update_in_xla(self) -> bool:
        """One device, no mirroring: the optimizer update has no merge_call (all-reduce), so
        XLA may compile it too. Mirrored strategies sync inside apply_gradients, even with
        one replica, and a merge_call cannot sit inside a nested tf.function."""
        mirrored = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
        return not isinstance(self.strategy, mirrored)


class CoordinatorExecutor:
    """ParameterServerStrategy: calls are scheduled on workers, per-worker datasets."""

    def __init__(self, strategy: tf.distribute.Strategy):
        self.strategy = strategy
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        self.workers = max(1, compat.worker_count(strategy))

    def iterator(self, dataset_fn: Callable):
        return iter(self.coordinator.create_per_worker_dataset(
            lambda: self.strategy.distribute_datasets_from_function(dataset_fn)))

    def chunk_steps(self, steps_per_loop: int, remaining: int) -> int:
        """All steps up to the boundary: scheduling them together keeps every worker busy."""
        return remaining

    def run(self, loop_fn, iterator, steps: int, steps_per_loop: int) -> tuple[np.ndarray, int]:
        """(metric sums, steps run). At most two closures per worker wait or run at a time,
        so every worker stays busy, and scheduling stops early once SIGTERM asked to preempt.
        """
        futures, done, waited, in_flight = [], 0, 0, 2 * self.workers
        while done < steps and not (futures and preemption.requested()):
            if len(futures) - waited >= in_flight:
                futures[waited].fetch()  # wait for the oldest one not yet waited for
                waited += 1
                continue
            n = min(steps_per_loop, steps - done)
            futures.append(self.coordinator.schedule(loop_fn, args=(iterator, tf.constant(n))))
            done += n
        self.coordinator.join()
        return sum(f.fetch() for f in futures), done

    def needs_statistics_sync(self, model) -> bool:
        return False  # variables live on the parameter servers: one copy already

    update_in_xla = False  # remote variables cannot live inside an XLA cluster


def replica_statistics(model) -> list:
    """The non-trainable weights a step may change on each replica (batch-norm moving
    statistics): those of frozen layers never change, so they are never averaged."""
    frozen = {id(v) for layer in compat.all_layers(model) if not layer.trainable
              for v in layer.weights}
    return [v for v in model.non_trainable_variables if id(v) not in frozen]


def make_executor(strategy: tf.distribute.Strategy):
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return CoordinatorExecutor(strategy)
    return SyncExecutor(strategy)
