"""Zero-loss preemption: SIGTERM makes a training run save at the step it reached and exit 143;
Ctrl-C (SIGINT) does the same and exits 130, and a second Ctrl-C ends the process at once.

Schedulers (Kubernetes, Spark, `tfyard launch local`) send SIGTERM, then SIGKILL after a
grace period. `install()` replaces the default action (die at once, losing up to one
checkpoint interval) with a handler that only sets a flag; Python runs it between
bytecodes, so a compiled chunk always finishes first. `PreemptionAction`
(`tfyard.train.actions`) reads the flag at every chunk end (SIGINT sets it too: a user's
Ctrl-C should not cost the steps since the last checkpoint). A second Ctrl-C means "now":
a watcher thread reads the signal from the wakeup fd (so it acts even while the main thread
is inside a save) and exits 130 without saving; the save in flight only ever wrote
`ckpt-N_temp`, so the previous checkpoint stays the latest.
It reads the flag at every chunk end:

- all-reduce members (MultiWorkerMirrored) add their flags with one scalar all-reduce, so
  when only one member was signalled they all stop after the same chunk (a member that
  stopped alone would leave its peers blocked in the next chunk's collectives);
- one process (OneDevice, Mirrored) and the parameter-server coordinator read it directly;
  the coordinator also stops scheduling closures once it is set
  (`loop.executors.CoordinatorExecutor`).

The run then stops (no export, no final evaluation), every member saves at that step
unless a checkpoint there exists, and `exit_preempted` ends the process with
PREEMPTED_EXIT_CODE (143), which the launchers restart on without spending a restart.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

from tfyard.errors import PREEMPTED_EXIT_CODE
from tfyard.runfiles.layout import checkpoint_name

log = logging.getLogger("tfyard")

_flag = threading.Event()
_first: list[int] = []  # the signal that set the flag: it decides the exit code
_wakeup: list[int] = []  # the read end of the wakeup pipe, once the watcher runs
# Steps are running: Ctrl-C saves (else KeyboardInterrupt); set by `PreemptionAction`.
running = threading.Event()


def _request(signum: int, frame=None) -> None:
    if signum == signal.SIGINT and not running.is_set() and not _flag.is_set():
        signal.default_int_handler(signum, frame)  # nothing trained to save (or a notebook)
    if not _first:
        _first.append(signum)
    _flag.set()


def install() -> None:
    """SIGTERM and SIGINT set the flag instead of killing the process (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _request)
    signal.signal(signal.SIGINT, _request)
    if not _wakeup:
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        _wakeup.append(read_end)
        threading.Thread(target=_second_interrupt, args=(read_end,), daemon=True,
                         name="tfyard-interrupt").start()


def _second_interrupt(read_end: int) -> None:
    """Exit 130 at the second SIGINT, even while the main thread is busy in a save."""
    interrupts = 0
    while True:
        received = os.read(read_end, 64)
        if not received:
            return
        # counted while steps run, and after them while the stop they asked for goes on
        counting = running.is_set() or _flag.is_set()
        interrupts += received.count(signal.SIGINT) if counting else 0
        if interrupts >= 2:
            os.write(2, b"tfyard: interrupted again; stopped without saving (the previous "
                        b"checkpoint is intact)\n")
            os._exit(128 + signal.SIGINT)


def requested() -> bool:
    """Whether this process got SIGTERM or SIGINT."""
    return _flag.is_set()


def reset() -> None:
    _flag.clear()
    _first.clear()


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


def exit_preempted(step: int) -> None:
    """The one line, then exit 143 after SIGTERM, 130 after Ctrl-C (SystemExit: `finally`
    blocks and atexit still run)."""
    interrupted = _first[:1] == [signal.SIGINT]
    code = 128 + signal.SIGINT if interrupted else PREEMPTED_EXIT_CODE
    if threading.current_thread() is threading.main_thread():
        # saved: another Ctrl-C while the interpreter shuts down (when Python's own handler
        # is gone) would end it as killed by SIGINT instead of exit 130
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    log.warning(f"tfyard: {'interrupted' if interrupted else 'preempted'} at step {step}; "
                f"saved checkpoint {checkpoint_name(step)}; rerun to resume (exit {code})")
    raise SystemExit(code)
