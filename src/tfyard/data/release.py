"""Deletes tf.data iterators off the thread that is done with them.

TensorFlow 2.21 joins an iterator's autotuning thread when the iterator is deleted, and once
the iterator has lived about 80 s that thread sleeps in 60 s periods that deletion does not
cut short: the delete blocks its caller for up to a minute (42 s for one that lived 100 s,
`benchmarks/iterator_release.py`). An evaluation over a large split would end that much
later, and a training iterator left to the garbage collector would freeze whatever code the
collection interrupts. `release` hands the reference to one daemon thread, which drops it
once it holds the last one: the wait, if any, is that thread's.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Iterable, Iterator

_retired: queue.SimpleQueue = queue.SimpleQueue()
_dropper: list[threading.Thread] = []
_start = threading.Lock()
# How long the dropper waits for the caller's own references to go before dropping its one.
HANDOVER_S = 5.0


def release(iterator) -> None:
    """Let `iterator` be deleted on the dropper thread; the caller keeps no reference."""
    with _start:
        if not _dropper:
            _dropper.append(threading.Thread(target=_drop, name="tfyard-release", daemon=True))
            _dropper[0].start()
    _retired.put(iterator)


def _drop() -> None:
    while True:
        item = _retired.get()
        deadline = time.monotonic() + HANDOVER_S
        # 2: `item` and getrefcount's argument; the caller's frame may still hold one
        while sys.getrefcount(item) > 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        del item


def drained(dataset: Iterable) -> Iterator:
    """The elements of `dataset`; its iterator is released when the loop ends or stops."""
    iterator = iter(dataset)
    try:
        yield from iterator
    finally:
        release(iterator)
        del iterator
