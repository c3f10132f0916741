"""Zero-loss preemption: SIGTERM makes a training run save at the step it reached and exit 143.

Schedulers (Kubernetes, Spark, `tfyard launch local`) send SIGTERM, then SIGKILL after a
grace period. `install()` replaces the default action (die at once, losing up to one
checkpoint interval) with a handler that only sets a flag; Python runs it between
bytecodes, so a compiled chunk always finishes first. `PreemptionAction` reads the flag at
every chunk end:

- all-reduce members (MultiWorkerMirrored) add their flags with one scalar all-reduce, so
  when only one member was signalled they all stop after the same chunk (a member that
  stopped alone would leave its peers blocked in the next chunk's collectives);
- one process (OneDevice, Mirrored) and the parameter-server coordinator read it directly;
  the coordinator also stops scheduling closures once it is set (`loop.CoordinatorExecutor`).

The run then stops (no export, no final evaluation), every member saves at that step
unless a checkpoint there exists, and `exit_preempted` ends the process with
PREEMPTED_EXIT_CODE (143), which the launchers restart on without spending a restart.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

from tfyard.errors import PREEMPTED_EXIT_CODE
from tfyard.train.controller import Action, RunState

log = logging.getLogger("tfyard")
PREEMPTED = "preempted"  # the stop reason in RunState and summary.json

_flag = threading.Event()


def install() -> None:
    """SIGTERM sets the flag instead of killing the process (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda _signum, _frame: _flag.set())


def requested() -> bool:
    """Whether this process got SIGTERM."""
    return _flag.is_set()


def reset() -> None:
    _flag.clear()


def agreement(strategy) -> Callable[[bool], bool]:
    """`agree(local) -> any member's flag`: one scalar all-reduce under MultiWorkerMirrored,
    the local flag elsewhere. Every member must call it at the same points."""
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return lambda local: local

    @tf.function(autograph=False)
    def total(flag):
        flags = strategy.run(tf.identity, args=(flag,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None)

    return lambda local: float(total(tf.constant(1.0 if local else 0.0))) > 0


class PreemptionAction(Action):
    """Stops the run after the chunk in which any member got SIGTERM, and saves there.

    `checkpoints` is the run's `Checkpoints`; `synchronize()` averages replica-local state
    (batch-norm statistics) as the Controller does before its boundary saves.
    """

    def __init__(self, strategy, checkpoints, synchronize: Callable[[], None],
                 flag: Callable[[], bool] = requested):
        self.checkpoints = checkpoints
        self.synchronize = synchronize
        self.flag = flag
        self.agree = agreement(strategy)

    def on_chunk_end(self, state: RunState) -> None:
        if not state.finished and self.agree(self.flag()):
            state.request_stop(PREEMPTED)

    def on_end(self, state: RunState) -> None:
        if state.stop_reason != PREEMPTED:
            return
        saved = state.outputs.get("checkpoint") or ""
        if not saved.endswith(f"ckpt-{state.step}"):  # not saved at a boundary this round
            self.synchronize()
            state.outputs["checkpoint"] = self.checkpoints.save(state.step)


def exit_preempted(step: int) -> None:
    """The one line, then exit 143 (SystemExit: `finally` blocks and atexit still run)."""
    log.warning(f"tfyard: preempted at step {step}; saved checkpoint ckpt-{step}; rerun to "
                f"resume (exit {PREEMPTED_EXIT_CODE})")
    raise SystemExit(PREEMPTED_EXIT_CODE)
