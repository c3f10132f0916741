"""`tfyard.progress`: a bar on a terminal; into a pipe or a log a line at the start, one a
minute (here a few hundredths of a second), and one at the end, none for a failure."""

from __future__ import annotations

import io
import re
import time

import pytest

from tfyard.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_into_a_pipe_a_line_at_start_one_a_minute_and_one_at_the_end():
    log = io.StringIO()
    with Progress(3, "shards", "writing", "wrote", stream=log, every=0.05) as progress:
        progress.advance()
        time.sleep(0.3)
        progress.advance(2)
    first, *ticks, last = log.getvalue().splitlines()
    assert first == "writing 3 shards"
    assert ticks and all(re.fullmatch(r"wrote [1-3]/3 shards, 0:00:00", t) for t in ticks)
    assert last == "wrote 3 shards in 0:00:00"


def test_a_short_job_into_a_pipe_prints_two_lines_and_a_failure_no_end():
    log = io.StringIO()
    with Progress(2, "shards", "writing", "wrote", stream=log) as progress:
        progress.advance(2)
    assert log.getvalue() == "writing 2 shards\nwrote 2 shards in 0:00:00\n"
    failed = io.StringIO()
    with pytest.raises(OSError), Progress(2, "shards", "writing", "wrote", stream=failed):
        raise OSError("disk full")
    assert failed.getvalue() == "writing 2 shards\n"


def test_on_a_terminal_a_rich_bar():
    screen = Terminal()
    with Progress(3, "shards", "writing", "wrote", stream=screen) as progress:
        for _ in range(3):
            progress.advance()
    drawn = screen.getvalue()
    assert "\x1b[" in drawn and "writing shards" in drawn and "3/3" in drawn
    assert "wrote" not in drawn   # the bar is the whole story
