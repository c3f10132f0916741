"""What the launchers print: every member's prefixed lines and the launcher's own, through
one writer, whole lines at a time, and how many of a failed member's last lines the final
report repeats."""

from __future__ import annotations

import collections
import re
import threading
from collections.abc import Sequence

TAIL_LINES = 10  # of a failed member's output, repeated in the final error


class LockedWriter:
    """Whole lines from every member and the launcher to one stream, one writer at a time.

    A member's `tfyard ...: error: ...` line that another member already printed is left out:
    a bad flag fails every member alike, and once is enough. `recent` holds the last lines
    written, so the final report repeats only a failed member's lines that scrolled away.
    """

    def __init__(self, stream):
        self.stream, self.lock = stream, threading.Lock()
        self.errors: set[str] = set()
        self.recent: collections.deque = collections.deque(maxlen=TAIL_LINES)

    def __call__(self, text: str) -> None:
        said = _member_error(text)
        if said is not None:
            with self.lock:
                if said in self.errors:
                    return
                self.errors.add(said)
        with self.lock:
            self.stream.write(text)
            self.stream.flush()
            self.recent.extend(text.splitlines())

    def unseen(self, lines: Sequence[str]) -> list[str]:
        """`lines` less those among the last ones written and the error lines said before
        (a member's, left out above when another member had said it first)."""
        return [line for line in lines
                if line not in self.recent and _member_error(line) not in self.errors]


_ERROR = re.compile(r"tfyard( [\w-]+)*: error: ")  # `tfyard: error:`, `tfyard train: error:`


def _member_error(text: str) -> str | None:
    """The error of a member's prefixed line (`[worker:1] tfyard train: error: ...`)."""
    prefix, _, said = text.rstrip("\n").partition("] ")
    return said if prefix.startswith("[") and _ERROR.match(said) else None


def locked_writer(stream) -> LockedWriter:
    return LockedWriter(stream)
