"""Guards: actions that stop a run which can no longer learn, in one line.

`DivergenceGuard` runs after every chunk, before the checkpoint action. A non-finite
training loss or gradient ends the run at the first step that produced it (`tfyard: error: training
diverged at step N: loss nan; ...`, exit 2). With `--skip_nonfinite_steps N` the compiled
step skips such updates instead (see `Trainer`), and the guard stops the run once N steps in
a row were skipped. A skipped step leaves the weights and the optimizer as they were, but
batch-norm statistics move in the forward pass (as under Keras' LossScaleOptimizer);
`Checkpoints.save` refuses any non-finite state on its own, so the last finite checkpoint
is never rotated away.
"""

from __future__ import annotations

import math

from tfyard.errors import UserError
from tfyard.train.controller import Action, RunState


def diverged(what: str, dtype: str | None, last_checkpoint: str | None) -> UserError:
    """The one-line error of a diverged run; `what` says where and how."""
    hint = "lower --learning_rate" + (" or try --dtype float32" if dtype not in (
        None, "float32") else "")
    kept = f"last finite checkpoint: {last_checkpoint} kept" if last_checkpoint \
        else "no checkpoint was written"
    return UserError(f"training diverged {what}; {hint} ({kept})")


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
