"""`release` and `drained`: an iterator is deleted on a release thread, so that neither the
code done with it nor a garbage collection waits on TensorFlow's deletion of a long-lived
tf.data iterator (up to a minute, `benchmarks/iterator_release.py`)."""

from __future__ import annotations

import threading
import time

import pytest

from tfyard.data.release import drained, release

SLOW_DELETE_S = 1.0


class SlowToDelete:
    """An iterator of three items whose deletion takes SLOW_DELETE_S, and names its thread."""

    def __init__(self, deleted: list[str]):
        self.deleted, self.left = deleted, 3

    def __iter__(self):
        return self

    def __next__(self):
        if not self.left:
            raise StopIteration
        self.left -= 1
        return self.left

    def __del__(self):
        time.sleep(SLOW_DELETE_S)
        self.deleted.append(threading.current_thread().name)


def deleted_on(deleted: list[str]) -> list[str]:
    deadline = time.monotonic() + 10
    while not deleted and time.monotonic() < deadline:
        time.sleep(0.05)
    return deleted


def test_a_released_iterator_is_deleted_on_the_dropper_thread_and_the_caller_goes_on():
    deleted: list[str] = []
    started = time.monotonic()
    release(SlowToDelete(deleted))
    assert time.monotonic() - started < SLOW_DELETE_S / 2 and deleted == []
    assert deleted_on(deleted) == ["tfyard-release"]


@pytest.mark.parametrize("stop_early", [False, True])
def test_a_loop_over_drained_releases_its_iterator_when_it_ends_or_stops(stop_early):
    deleted: list[str] = []
    seen = []
    started = time.monotonic()
    for item in drained(SlowToDelete(deleted)):
        seen.append(item)
        if stop_early:
            break
    assert seen == ([2] if stop_early else [2, 1, 0])
    assert time.monotonic() - started < SLOW_DELETE_S / 2
    assert deleted_on(deleted) == ["tfyard-release"]
