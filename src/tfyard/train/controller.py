"""The outer loop: a `Controller` runs a `Trainer` in chunks and calls its actions.

It decides the cadence (chunks, boundaries at epoch ends and at each action's `every_steps`,
the end); everything that is not the step is an `Action`: checkpointing, reports, console
output, evaluation, export, and guards. Hooks, in the order they run:

    on_start(state)      once, before the first chunk
    on_chunk_end(state)  after every chunk, with state.metrics of that chunk
    on_boundary(state)   at epoch ends, the last step, and every action's `every_steps`
    on_end(state)        once, after the last step or an early stop (not after an error)
    close()              always, last, even after an error; every action's, even when one fails

An action stops the run early by calling `state.request_stop(reason)` or raising
`StopTraining(reason)`; the Controller finishes the current hook round, skips further
chunks, runs `on_end` and returns the state with `stop_reason` set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("tfyard")


class StopTraining(Exception):
    """Raised by an action to end the run after the current hook round."""


@dataclass
class RunState:
    """What actions see: where the run is and what it measured."""

    step: int
    total_steps: int
    steps_per_epoch: int
    start_step: int = 0
    metrics: dict = field(default_factory=dict)   # the last chunk's train metrics
    eval: dict | None = None                      # the last evaluation
    eval_step: int | None = None                  # the step it was made at
    outputs: dict = field(default_factory=dict)   # what actions produced (checkpoint, export)
    chunk_steps: int = 0
    chunk_seconds: float = 0.0
    # Seconds the last chunk waited for input (its `input_wait` share of the chunk time,
    # measured around next(iterator) inside the compiled loop); None until measured.
    input_wait_seconds: float | None = None
    rates: list[float] = field(default_factory=list)   # images/sec of every chunk
    stop_reason: str | None = None
    started: float = field(default_factory=time.time)

    @property
    def epoch(self) -> float:
        return self.step / self.steps_per_epoch

    @property
    def finished(self) -> bool:
        return self.step >= self.total_steps

    @property
    def at_epoch_end(self) -> bool:
        return self.step % self.steps_per_epoch == 0

    def due(self, every: int | None) -> bool:
        """True at multiples of `every` and at the last step."""
        return self.finished or bool(every) and self.step % every == 0

    def elapsed(self) -> float:
        return time.time() - self.started

    def request_stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason

    def mean_rate(self) -> float:
        """Mean images/sec, leaving out the first chunk (tracing, warm-up) when possible."""
        steady = self.rates[1:] or self.rates
        return sum(steady) / len(steady) if steady else 0.0


class Action:
    """Base class: override the hooks you need. `every_steps` adds boundaries."""

    every_steps: int | None = None
    # Steps a chunk must end at (on_chunk_end runs there), without being boundaries.
    chunk_ends: tuple[int, ...] = ()

    def on_start(self, state: RunState) -> None: ...

    def on_chunk_end(self, state: RunState) -> None: ...

    def on_boundary(self, state: RunState) -> None: ...

    def on_end(self, state: RunState) -> None: ...

    def close(self) -> None: ...


class Controller:
    """Runs `trainer` from its current step to `total_steps`, calling `actions` in order."""

    def __init__(self, trainer, total_steps: int, steps_per_epoch: int,
                 actions: Sequence[Action] = ()):
        self.trainer = trainer
        self.actions = list(actions)
        step = int(trainer.step.numpy())
        self.state = RunState(step=step, total_steps=total_steps,
                              steps_per_epoch=steps_per_epoch, start_step=step)

    def add(self, action: Action) -> Controller:
        self.actions.append(action)
        return self

    def run(self) -> RunState:
        state = self.state
        try:
            self._call("on_start")
            while not state.finished and state.stop_reason is None:
                self._run_chunk(self._next_boundary() - state.step)
                self._call("on_chunk_end")
                if state.finished or self._at_boundary():
                    self.trainer.synchronize()
                    self._call("on_boundary")
            self._call("on_end")
        except BaseException:
            self._close(failed=True)
            raise
        self._close(failed=False)
        return state

    def _close(self, failed: bool) -> None:
        """Close every action, even after one's close() fails. The first failure is raised,
        unless the run itself `failed` (its error is the one raised); every other is logged,
        so none hides another or skips a close."""
        first = None
        for action in self.actions:
            try:
                action.close()
            except BaseException as exc:  # noqa: BLE001 - every action still gets closed
                if first is None and not failed:
                    first = exc
                else:
                    log.warning(f"tfyard: warning: closing {type(action).__name__} failed: "
                                f"{type(exc).__name__}: {exc}")
        if first is not None:
            raise first

    def _run_chunk(self, remaining: int) -> None:
        state = self.state
        steps = self.trainer.chunk_steps(remaining)
        started = time.perf_counter()
        state.metrics = self.trainer.train(steps)
        steps = int(self.trainer.step.numpy()) - state.step  # fewer if preempted mid-chunk
        state.chunk_seconds = time.perf_counter() - started
        state.chunk_steps = steps
        if state.metrics.get("input_wait") is not None:
            state.input_wait_seconds = state.metrics["input_wait"] * state.chunk_seconds
        state.step += steps
        state.rates.append(state.metrics["images_per_sec"])

    def _everies(self) -> list[int]:
        return [self.state.steps_per_epoch] + [a.every_steps for a in self.actions
                                               if a.every_steps]

    def _next_boundary(self) -> int:
        step = self.state.step
        cuts = [s for a in self.actions for s in a.chunk_ends if s > step]
        return min([self.state.total_steps, *cuts] + [(step // n + 1) * n
                                                      for n in self._everies()])

    def _at_boundary(self) -> bool:
        return any(self.state.step % n == 0 for n in self._everies())

    def _call(self, hook: str) -> None:
        for action in self.actions:
            try:
                getattr(action, hook)(self.state)
            except StopTraining as stop:
                self.state.request_stop(str(stop) or type(action).__name__)


class Callback(Action):
    """An action from plain functions, for tests and small additions."""

    def __init__(self, every_steps: int | None = None, **hooks: Callable[[RunState], None]):
        self.every_steps = every_steps
        for name, hook in hooks.items():
            if not hasattr(Action, name):
                raise TypeError(f"unknown hook {name}")
            setattr(self, name, hook)
