"""The background sender on real threads: its two policies (the newest item only; a bounded
queue), retries with doubling backoff after real failures, waking, and closing."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from tests.process import until
from tfyard.process.sender import Bounded, Newest, Sender, Timing

FAST = Timing(period=0.05, backoff=0.05, most_backoff=0.2, wake_on_add=True)


class Receiver:
    """The other side: records what it took; fails while `down`, blocks while `held`."""

    def __init__(self, failures: int = 0):
        self.got, self.calls, self.failures = [], [], failures
        self.down = threading.Event()
        self.held = threading.Event()
        self.held.set()
        self.entered = threading.Event()

    def __call__(self, batch):
        self.calls.append((time.monotonic(), list(batch)))
        self.entered.set()
        self.held.wait()
        if self.failures > 0 or self.down.is_set():
            self.failures -= 1
            raise ConnectionError("the store is away")
        self.got.append(list(batch))



def test_newest_sends_the_newest_and_drops_the_ones_overtaken():
    receiver, dropped = Receiver(), []
    receiver.held.clear()
    sender = Sender(receiver, Newest(dropped.append), FAST, "test-newest")
    sender.add("ckpt-1")
    assert receiver.entered.wait(10)          # ckpt-1 is being sent
    sender.add("ckpt-2")
    sender.add("ckpt-3")                      # overtakes ckpt-2 before it started
    receiver.held.set()
    assert sender.close(20)
    assert receiver.got == [["ckpt-1"], ["ckpt-3"]]
    assert dropped == ["ckpt-2", "ckpt-1", "ckpt-3"]   # each once: overtaken, or once sent


def test_newest_retries_a_failed_item_unless_a_newer_one_came():
    receiver, dropped = Receiver(failures=1), []
    receiver.held.clear()
    sender = Sender(receiver, Newest(dropped.append), FAST, "test-newest-retry")
    sender.add("ckpt-1")
    assert receiver.entered.wait(10)
    receiver.held.set()                       # ckpt-1 fails once, then goes
    assert until(lambda: receiver.got == [["ckpt-1"]])
    receiver.failures, receiver.entered = 1, threading.Event()
    receiver.held.clear()
    sender.add("ckpt-2")
    assert receiver.entered.wait(10)
    sender.add("ckpt-3")                      # came while ckpt-2 failed: ckpt-2 is not retried
    receiver.held.set()
    assert sender.close(20)
    assert receiver.got == [["ckpt-1"], ["ckpt-3"]]
    assert [batch for _, batch in receiver.calls] == [["ckpt-1"], ["ckpt-1"], ["ckpt-2"],
                                                      ["ckpt-3"]]
    assert sorted(dropped) == ["ckpt-1", "ckpt-2", "ckpt-3"]


def test_bounded_keeps_the_newest_within_its_limit_and_sends_in_order_in_batches():
    receiver = Receiver()
    receiver.down.set()
    queue = Bounded(limit=5, most=2)
    sender = Sender(receiver, queue, FAST, "test-bounded")
    for number in range(1, 8):
        sender.add(number)
    assert until(lambda: len(receiver.calls) >= 2)   # the server is away: retried
    assert (queue.held, queue.dropped) == (5, 2)     # 1 and 2, the oldest, dropped
    receiver.down.clear()
    assert sender.close(20)
    assert receiver.got == [[3, 4], [5, 6], [7]]
    assert (queue.held, queue.dropped) == (0, 2)


def test_a_batch_weighs_at_most_its_limit_but_one_heavy_item_still_goes():
    receiver = Receiver()
    queue = Bounded(limit=100, most=5, weight=len)
    sender = Sender(receiver, queue, Timing(period=60, backoff=1, most_backoff=1), "test-w")
    for item in ("aaa", "bb", "c", "dddddddd", "ee"):
        sender.add(item)
    assert sender.close(20)
    assert receiver.got == [["aaa", "bb"], ["c"], ["dddddddd"], ["ee"]]


def test_failures_are_retried_with_doubling_backoff_and_named_once_per_run_of_failures():
    receiver, told = Receiver(failures=4), []
    timing = Timing(period=60, backoff=0.2, most_backoff=0.8, wake_on_add=True)
    sender = Sender(receiver, Newest(), timing, "test-backoff", on_failing=told.append)
    sender.add("report")
    assert until(lambda: receiver.got == [["report"]])
    times = [at for at, _ in receiver.calls]
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert len(gaps) == 4
    for gap, backoff in zip(gaps, (0.2, 0.4, 0.8, 0.8), strict=True):   # doubled, at most 0.8
        assert gap >= backoff * 0.95, gaps
    assert len(told) == 1 and isinstance(told[0], ConnectionError)
    assert sender.failing_since is None   # it went: no longer failing
    assert str(sender.error) == "the store is away"
    receiver.failures = 1
    sender.add("next")
    assert until(lambda: receiver.got[-1:] == [["next"]])
    assert len(told) == 2                 # a new run of failures is named again
    assert sender.close(20)


def test_failing_since_says_how_long_it_has_failed():
    receiver = Receiver()
    receiver.down.set()
    sender = Sender(receiver, Newest(), FAST, "test-failing")
    before = time.monotonic()
    sender.add("x")
    assert until(lambda: sender.failing_since is not None)
    assert before <= sender.failing_since <= time.monotonic()
    assert not sender.close(0.3)          # gave up: never went
    assert receiver.got == []


def test_without_waking_an_item_waits_for_the_period_or_the_close():
    receiver = Receiver()
    sender = Sender(receiver, Bounded(limit=10, most=10),
                    Timing(period=60, backoff=1, most_backoff=1), "test-period")
    sender.add("metric")
    time.sleep(0.3)
    assert receiver.calls == []           # no round before the period: batched
    assert sender.close(20)
    assert receiver.got == [["metric"]]


def test_close_retries_each_closing_retry_until_it_goes():
    receiver = Receiver()
    receiver.down.set()
    timing = Timing(period=60, backoff=30, most_backoff=30, closing_retry=0.1)
    sender = Sender(receiver, Newest(), timing, "test-closing")
    sender.add("last")
    closed = []
    closing = threading.Thread(target=lambda: closed.append(sender.close(30)))
    closing.start()
    assert until(lambda: len(receiver.calls) >= 3)   # every 0.1 s, not after a 30 s backoff
    receiver.down.clear()
    closing.join(30)
    assert closed == [True] and receiver.got == [["last"]]


def test_a_close_that_gives_up_stops_the_thread():
    receiver = Receiver()
    receiver.down.set()
    sender = Sender(receiver, Newest(), FAST, "test-given-up")
    sender.add("x")
    assert not sender.close(0.3)
    assert until(lambda: "test-given-up" not in {t.name for t in threading.enumerate()})


def test_every_round_runs_after_the_items():
    order = []
    rounds = threading.Event()

    def every_round():
        order.append("files")
        rounds.set()

    sender = Sender(lambda batch: order.extend(batch), Newest(), FAST, "test-every",
                    every_round=every_round)
    sender.add("ckpt")
    assert rounds.wait(10)
    assert sender.close(20)
    assert order[:2] == ["ckpt", "files"] and set(order[2:]) <= {"files"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own priority "
                    "is Linux's")
def test_a_nice_sender_sends_from_a_thread_of_lower_priority():
    seen = []

    def send(batch):
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    sender = Sender(send, Newest(), FAST, "test-nice", nice=5)
    sender.add("ckpt-1")
    assert sender.close(20)
    assert seen == [min(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) + 5, 19)]


def test_spaced_sends_wait_for_a_later_round_and_the_close_sends_at_once():
    receiver = Receiver()
    timing = Timing(period=0.05, backoff=0.05, most_backoff=0.2, wake_on_add=True, spacing=0.8)
    sender = Sender(receiver, Newest(), timing, "test-spaced")
    sender.add("ckpt-1")
    assert until(lambda: receiver.got == [["ckpt-1"]])   # the first at once
    sender.add("ckpt-2")
    sender.add("ckpt-3")                                  # overtakes ckpt-2 while it waits
    assert until(lambda: len(receiver.got) == 2)
    (first, _), (second, _) = receiver.calls
    assert receiver.got[1] == ["ckpt-3"] and second - first >= 0.8 * 0.95
    sender.add("ckpt-4")
    assert sender.close(20)                               # the last goes before the spacing
    assert receiver.got[2:] == [["ckpt-4"]] and receiver.calls[2][0] - second < 0.8
