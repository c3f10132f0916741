"""Deletes tf.data iterators off the thread that is done with them.

TensorFlow 2.21 joins an iterator's autotuning thread when the iterator is deleted, and does
not always wake it first: deleting an iterator that has lived a minute or more now and then
blocks for the rest of that thread's sleep, up to 60 s (2-60 s on 4 of 15 iterators 60-200 s
old; `benchmarks/iterator_release.py`). An evaluation over a large split would end that much
later, and a training iterator left to the garbage collector would freeze whatever code the
collection interrupts. `release` hands the reference to a thread of its own, which drops it
once it holds the last one.

The thread is not a daemon: a process that ends while one is deleting waits for it, as it
would have waited in place. A daemon thread that finished TensorFlow's delete while the
interpreter shuts down would abort the process (its forced exit unwinds C++ frames). The
`tfyard` command ends its process before that teardown (`cli.run`), so its threads are
daemons (`skip_at_exit`): its end waits for no iterator's delete.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Iterator

# How long a release waits for its caller's own references to go before dropping its one.
HANDOVER_S = 5.0
_daemon = False   # the releasing threads are daemons (`skip_at_exit`)


def skip_at_exit() -> None:
    """The process ends without the interpreter's teardown: its exit need not wait for a
    release in progress."""
    global _daemon
    _daemon = True


def release(iterator) -> None:
    """Let `iterator` be deleted on a thread of its own; the caller keeps no reference."""
    if sys.is_finalizing() or not threading.main_thread().is_alive():
        return   # the process is ending: a thread started now would not be waited for
    box = [iterator]
    del iterator
    threading.Thread(target=_drop, args=(box,), name="tfyard-release", daemon=_daemon).start()


def _drop(box: list) -> None:
    item = box.pop()
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
