"""One background sender: what the caller hands over (`add`) is held under a policy and sent
by a daemon thread, so the caller (a training step) never waits on the network.

The policy says what is held while the other side is slow or away: `Newest` keeps only the
newest item (a run's latest checkpoint: an older one not yet started is dropped, so a slow
store costs no disk); `Bounded` keeps items in order up to a weight (metrics: the oldest go
first, counted). The thread sends every `period` s, at once when woken; a failure is
retried with doubling backoff, and `close` waits for a last round that succeeds. A `spacing`
keeps sends apart: an item added sooner after the last send waits for a later round (with
`Newest`, a save superseded meanwhile is never sent), while closing sends at once. The two
users, the bucket publisher and the MLflow tracker, differ only in these parameters. A
sender may run at a lower OS priority (`nice`, Linux's per-thread niceness, which threads it
starts inherit), so that on a busy node training's threads take the cores first.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """`period`: seconds between rounds; `backoff`: the wait after a first failure, doubled
    after each next one up to `most_backoff`; `wake_on_add`: a round at once for each item
    (else at the next period); `closing_retry`: while closing, the wait after a failure
    (None: the backoff); `spacing`: the least seconds from the start of a send that
    succeeded to the next send (its item then waits for the first round after, which is at
    most `period` later; closing sends at once)."""

    period: float
    backoff: float
    most_backoff: float
    wake_on_add: bool = False
    closing_retry: float | None = None
    spacing: float = 0.0


class Newest:
    """Holds one item: a newer one replaces it, and the replaced one is dropped."""

    def __init__(self, drop: Callable = lambda item: None):
        self.item, self._drop = None, drop

    def add(self, item) -> None:
        old, self.item = self.item, item
        if old is not None:
            self._drop(old)

    def take(self) -> list:
        item, self.item = self.item, None
        return [] if item is None else [item]

    def restore(self, batch: list) -> None:
        """A batch that failed is tried again, unless a newer item came meanwhile."""
        for item in batch:
            if self.item is None:
                self.item = item
            else:
                self._drop(item)

    def done(self, batch: list) -> None:
        for item in batch:
            self._drop(item)


class Bounded:
    """Holds items in order while their weight (with those being sent) is at most `limit`:
    beyond it the oldest are dropped and counted. A batch weighs at most `most` (or is one
    item)."""

    def __init__(self, limit: float, most: float, weight: Callable = lambda item: 1):
        self.limit, self.most, self.weight = limit, most, weight
        self._items: collections.deque = collections.deque()
        self.held = 0       # the weight held or being sent
        self.dropped = 0    # the weight dropped over the limit

    def add(self, item) -> None:
        self._items.append(item)
        self.held += self.weight(item)
        while self.held > self.limit and self._items:
            oldest = self.weight(self._items.popleft())
            self.held -= oldest
            self.dropped += oldest

    def take(self) -> list:
        batch, weight = [], 0
        while self._items and not (batch and weight + self.weight(self._items[0]) > self.most):
            batch.append(self._items.popleft())
            weight += self.weight(batch[-1])
        return batch

    def restore(self, batch: list) -> None:
        self._items.extendleft(reversed(batch))

    def done(self, batch: list) -> None:
        self.held -= sum(map(self.weight, batch))


class Sender:
    """Sends what `keep` holds with `send(batch)` from a daemon thread named `name`, then
    runs `every_round` (work of its own, such as changed files); `on_failing(exc)` is told
    when a run of failures starts. `failing_since` (monotonic) and `error` say how it goes.
    `nice`: how much lower than the caller's the thread's OS priority is (Linux only)."""

    def __init__(self, send: Callable, keep, timing: Timing, name: str, *,
                 on_failing: Callable = lambda exc: None, every_round: Callable | None = None,
                 nice: int = 0):
        self.keep, self.timing, self.nice = keep, timing, nice
        self._send, self._on_failing, self._every_round = send, on_failing, every_round
        self.lock = threading.Lock()
        self._wake, self._closing, self._flushed, self._given_up = (
            threading.Event(), threading.Event(), threading.Event(), threading.Event())
        self.failing_since: float | None = None
        self.error: Exception | None = None
        self._last_sent = -float("inf")   # when the last send that succeeded started
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def add(self, item) -> None:
        with self.lock:
            self.keep.add(item)
        if self.timing.wake_on_add and self._spaced():
            self._wake.set()

    def close(self, timeout: float) -> bool:
        """A last round that succeeds, waited for `timeout` s at most; whether it came (else
        the thread gives up)."""
        self._closing.set()
        self._wake.set()
        if self._flushed.wait(timeout):
            return True
        self._given_up.set()
        return False

    @property
    def given_up(self) -> bool:
        """Whether `close` has stopped waiting for the last round."""
        return self._given_up.is_set()

    def _run(self) -> None:
        if self.nice and sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):   # a thread's id is a PRIO_PROCESS id there
                tid = threading.get_native_id()
                os.setpriority(os.PRIO_PROCESS, tid,
                               os.getpriority(os.PRIO_PROCESS, tid) + self.nice)
        backoff = None   # None: the last round succeeded
        while True:
            if backoff is None:
                self._wake.wait(self.timing.period)
            self._wake.clear()   # this round takes what woke it
            closing = self._closing.is_set()
            try:
                self._round()
            except Exception as exc:  # noqa: BLE001 - whatever fails, the caller goes on
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                    self._on_failing(exc)
                self.error = exc
                backoff = (self.timing.backoff if backoff is None
                           else min(backoff * 2, self.timing.most_backoff))
                if not closing:
                    self._closing.wait(backoff)
                elif self._given_up.wait(self.timing.closing_retry or backoff):
                    return
                continue
            self.failing_since, backoff = None, None
            if closing:
                self._flushed.set()
                return

    def _spaced(self) -> bool:
        """Whether a send may start now: `spacing` s after the last one, or closing."""
        return (self._closing.is_set()
                or time.monotonic() - self._last_sent >= self.timing.spacing)

    def _round(self) -> None:
        while self._spaced():
            with self.lock:
                batch = self.keep.take()
            if not batch:
                break
            started = time.monotonic()
            try:
                self._send(batch)
            except BaseException:
                with self.lock:
                    self.keep.restore(batch)
                raise
            self._last_sent = started
            with self.lock:
                self.keep.done(batch)
        if self._every_round is not None:
            self._every_round()
