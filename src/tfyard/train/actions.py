"""The Controller's actions: checkpoint, metrics files, console, evaluation, export, profiler
trace, and the two that stop a run: the divergence guard and preemption.

`tfyard train` registers them in this order, so at a boundary the checkpoint is written
before the evaluation that may be slow, and the evaluation is there for the reporters.

`DivergenceGuard` runs after every chunk, before the checkpoint action. A non-finite
training loss or gradient ends the run at the first step that produced it (`tfyard: error:
training diverged at step N: loss nan; ...`, exit 2). With `--skip_nonfinite_steps N` the
compiled step skips such updates instead (see `Trainer`), and the guard stops the run once N
steps in a row were skipped. A skipped step leaves the weights and the optimizer as they
were, but batch-norm statistics move in the forward pass (as under Keras'
LossScaleOptimizer); `Checkpoints.save` refuses any non-finite state on its own, so the last
finite checkpoint is never rotated away.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from tfyard.errors import PAUSED, PREEMPTED, UserError
from tfyard.runfiles.layout import checkpoint_name
from tfyard.train.controller import Action, RunState
from tfyard.train.outside import preemption
from tfyard.train.outside.console import Console
from tfyard.train.rundir.checkpoint import diverged

log = logging.getLogger("tfyard")


class CheckpointAction(Action):
    """Saves at every epoch end, every `every_steps` and the last step."""

    def __init__(self, checkpoints, every_steps: int | None = None):
        self.checkpoints = checkpoints
        self.every_steps = every_steps

    def on_boundary(self, state: RunState) -> None:
        if state.at_epoch_end or state.due(self.every_steps):
            state.outputs["checkpoint"] = self.checkpoints.save(state.step,
                                                                state.metrics.get("loss"))

    def close(self) -> None:
        self.checkpoints.close()


class EvalAction(Action):
    """Runs `evaluate() -> {"loss", "top1", "top5"}` every `every_steps` and at the end."""

    def __init__(self, evaluate: Callable[[], dict], every_steps: int | None = None):
        self.evaluate = evaluate
        self.every_steps = every_steps

    def on_start(self, state: RunState) -> None:
        """A rerun of a finished run trains nothing and meets no boundary; its summary
        still gets the figures of the model it restored (not recorded again)."""
        if state.finished:
            self.on_boundary(state)

    def on_boundary(self, state: RunState) -> None:
        if state.due(self.every_steps):
            state.eval = self.evaluate()
            state.eval_step = state.step


class MetricsAction(Action):
    """Each chunk's train metrics and each evaluation to metrics.jsonl and TensorBoard, and
    to the MLflow run's queue when the run is tracked; `figures()` adds what is measured
    outside the step to each train report (the data cache's, for data from a bucket)."""

    def __init__(self, reporter, tracker=None, figures: Callable[[], dict] = dict):
        self.reporter, self.tracker, self.figures = reporter, tracker, figures

    def on_chunk_end(self, state: RunState) -> None:
        self._report(self.reporter.report(state.step, state.epoch,
                                          {**state.metrics, **self.figures()}))

    def on_boundary(self, state: RunState) -> None:
        if state.eval_step == state.step:
            self._report(self.reporter.report(state.step, state.epoch, state.eval, kind="eval"))

    def _report(self, record: dict) -> None:
        if self.tracker is not None:
            self.tracker.log(record)

    def close(self) -> None:
        self.reporter.close()


class ConsoleAction(Action):
    """The per-report progress line (a live display on a terminal), the evaluation line and
    the one-time input-bound hint."""

    def __init__(self, console: Console):
        self.console = console

    def on_chunk_end(self, state: RunState) -> None:
        self.console.progress(state.step, state.metrics)

    def on_boundary(self, state: RunState) -> None:
        if state.eval_step == state.step:
            self.console.evaluation(state.step, state.eval)

    def close(self) -> None:
        self.console.close()


class ExportAction(Action):
    """Runs `export() -> dict` once at the end of a completed run; the result is in outputs."""

    def __init__(self, export: Callable[[], dict]):
        self.export = export

    def on_end(self, state: RunState) -> None:
        if state.stop_reason is None:
            state.outputs["export"] = self.export()


class OnFirstChunk(Action):
    """Calls `callback()` once the cluster has done real work (and at close, if it never did)."""

    def __init__(self, callback: Callable[[], None]):
        self.callback = callback

    def on_chunk_end(self, state: RunState) -> None:
        self.callback()

    def close(self) -> None:
        self.callback()


class ProfileAction(Action):
    """A TensorBoard profiler trace of steps `first` to `last` (1-based) into `logdir`.

    Chunks end at step first-1 and at last, so the trace holds exactly those steps (plus a
    checkpoint or evaluation due at step first-1, which runs after the trace starts).
    """

    def __init__(self, logdir: str, first: int, last: int):
        self.logdir, self.first, self.last = logdir, first, last
        self.chunk_ends = (first - 1, last)
        self.tracing = False

    def on_start(self, state: RunState) -> None:
        if self.first > state.total_steps or state.step >= self.last:
            # else the run would end without a trace and without a word
            why = (f"the run ends at step {state.total_steps}" if self.first > state.total_steps
                   else f"the run resumed at step {state.step}")
            log.warning(f"tfyard: --profile_steps {self.first},{self.last}: no trace ({why})")
            self.last = 0
        self.on_chunk_end(state)

    def on_chunk_end(self, state: RunState) -> None:
        import tensorflow as tf

        if not self.tracing and self.first - 1 <= state.step < self.last:
            try:
                tf.profiler.experimental.start(self.logdir)
                self.tracing = True
            except tf.errors.OpError as exc:   # another trace is running, say
                log.warning(f"tfyard: --profile_steps: no trace ({exc.message})")
                self.last = 0
        elif self.tracing and state.step >= self.last:
            self.close()

    def close(self) -> None:
        if self.tracing:
            import tensorflow as tf

            tf.profiler.experimental.stop()
            self.tracing = False
            log.info(f"tfyard: profiler trace of steps {self.first}-{self.last} in "
                     f"{self.logdir} (TensorBoard's Profile tab)")


class DivergenceGuard(Action):
    """Stops the run (UserError) at a non-finite loss, or after `max_skipped` steps in a row
    were skipped for non-finite gradients (0: skipping is off)."""

    def __init__(self, checkpoints, dtype: str = "float32", max_skipped: int = 0):
        self.checkpoints = checkpoints
        self.dtype = dtype
        self.max_skipped = max_skipped
        self.in_a_row = 0

    def on_chunk_end(self, state: RunState) -> None:
        metrics = state.metrics
        loss, skipped = metrics["loss"], metrics.get("skipped_steps", 0)
        nonfinite = metrics.get("nonfinite_steps", 0)
        if nonfinite or (skipped < state.chunk_steps and not math.isfinite(loss)):
            first = metrics.get("first_nonfinite_step", state.step - max(nonfinite, 1) + 1)
            what = f"loss {loss}" if not math.isfinite(loss) else \
                f"non-finite gradients (loss {loss:.4g})"
            raise self._error(f"at step {first}: {what}")
        if not self.max_skipped:
            return
        if skipped >= state.chunk_steps:
            self.in_a_row += skipped
        else:
            self.in_a_row = metrics.get("skipped_in_a_row", 0)
        if self.in_a_row >= self.max_skipped:
            raise self._error(
                f"by step {state.step}: the last {self.in_a_row} steps had a non-finite loss "
                f"or gradients and were skipped (--skip_nonfinite_steps {self.max_skipped})")

    def _error(self, what: str) -> UserError:
        return diverged(what, self.dtype, self.checkpoints.latest())


class PreemptionAction(Action):
    """Stops the run after the chunk in which any member got SIGTERM, and saves there; and
    likewise at `pause_at` (--pause_at_step), a chunk's end, as a scheduler asked.

    `checkpoints` is the run's `Checkpoints`; `synchronize()` averages replica-local state
    (batch-norm statistics) as the Controller does before its boundary saves.
    """

    def __init__(self, strategy, checkpoints, synchronize: Callable[[], None],
                 flag: Callable[[], bool] = preemption.requested, pause_at: int | None = None):
        self.checkpoints = checkpoints
        self.synchronize = synchronize
        self.flag = flag
        self.agree = preemption.agreement(strategy)
        self.pause_at = pause_at
        self.chunk_ends = (pause_at,) if pause_at else ()

    def on_start(self, state: RunState) -> None:
        preemption.running.set()
        if state.step == self.pause_at:   # resumed where it was to stop: stop there again
            state.request_stop(PAUSED)

    def close(self) -> None:
        preemption.running.clear()

    def on_chunk_end(self, state: RunState) -> None:
        asked = self.agree(self.flag())   # a collective: every member, every chunk
        if not state.finished and (asked or state.step == self.pause_at):
            state.request_stop(PREEMPTED if asked else PAUSED)

    def on_end(self, state: RunState) -> None:
        if state.stop_reason not in (PREEMPTED, PAUSED):
            return
        # saved at a boundary this round, or resumed where it was to stop: a second save
        # would rewrite the same files (in a bucket, objects of one name, not at once)
        saved = state.outputs.get("checkpoint") or self.checkpoints.latest() or ""
        if saved.endswith(checkpoint_name(state.step)):
            state.outputs["checkpoint"] = saved
        else:
            self.synchronize()
            state.outputs["checkpoint"] = self.checkpoints.save(state.step)
