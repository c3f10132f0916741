"""The filter process that keeps TensorFlow's C++ log lines off the real stderr.

`tfyard.quiet` routes fd 2 into a pipe and starts this module's `run_filter` as a process
of its own (`python -I`, this package first on its path) that reads the pipe: it drops the
C++ log lines of levels I, W and E with their continuation lines, the absl banner, a few
one-line notices of other runtimes and the teardown reports of PySpark and Spark's JVM, and
forwards everything else, FATAL lines included. The dropped lines go to the file
TFYARD_TF_LOG names, if any. It is apart from the routing because it is another
process's whole program: the routing starts it, and nothing else of tfyard runs there.
"""

from __future__ import annotations

import os
import re
import signal

# Where the hidden lines go, if anywhere (appended; members of a job may share it).
LOG_FILE_ENV = "TFYARD_TF_LOG"
# A C++ log line: level, MMDD, time (seconds since the epoch before absl is initialised),
# thread id, file:line].
LOG_PREFIX = r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] "
ABSL_BANNER = ("WARNING: All log messages before absl::InitializeLog() is called are written "
               "to STDERR")
_LOG = re.compile(("^" + LOG_PREFIX).encode())
_BANNER = ABSL_BANNER.encode()
# One-line notices of other runtimes on fd 2, dropped alone: Spark 4's JVM announcing the
# vector module it adds to every driver (`launch spark`, `predict --on spark`).
_NOTICES = (b"WARNING: Using incubator modules: ",)
# A traceback PySpark's worker daemon prints when the JVM drops a worker's connection as the
# SparkContext stops after a failed job (teardown, after tfyard's own one-line error).
_TRACEBACK = b"Traceback (most recent call last):"
_TEARDOWN = (b"pyspark/daemon.py", (b"ConnectionResetError", b"BrokenPipeError", b"EOFError"))


def split_log_lines(lines: list[bytes], dropping: bool):
    """(lines to keep, lines to drop, whether a dropped message still runs) for one chunk.

    A C++ log message arrives in one write, continuation lines included, so unprefixed
    lines right after a dropped log line in the same chunk are its continuation; FATAL
    lines and theirs are kept.
    """
    keep, drop = [], []
    for line in lines:
        if _LOG.match(line):
            dropping = line[:1] != b"F"
        elif line.rstrip(b"\r") == _BANNER:
            dropping = True
        elif line.startswith(_NOTICES):
            drop.append(line)
            dropping = False
            continue
        elif not dropping:
            keep.append(line)
            continue
        (drop if dropping else keep).append(line)
    return keep, drop, dropping


class TracebackHold:
    """Holds a Python traceback's lines until its exception line (the first unindented one),
    then passes it on, unless it is PySpark's worker daemon losing its connection."""

    def __init__(self):
        self.held: list[bytes] = []

    def split(self, lines: list[bytes]) -> tuple[list[bytes], list[bytes]]:
        """(lines to keep, lines to drop) of `lines`; a traceback still open stays held."""
        keep, drop = [], []
        for line in lines:
            if self.held:
                self.held.append(line)
                if line[:1] not in (b" ", b"\t", b""):   # its exception line: it ends
                    ours = not (any(_TEARDOWN[0] in held for held in self.held)
                                and line.startswith(_TEARDOWN[1]))
                    (keep if ours else drop).extend(self.held)
                    self.held = []
            elif line.rstrip(b"\r") == _TRACEBACK:
                self.held = [line]
            else:
                keep.append(line)
        return keep, drop

    def release(self) -> list[bytes]:
        """What is held when the stream ends: passed on as it is."""
        held, self.held = self.held, []
        return held


# Spark's barrier coordinator, when a member's failure cancels the stage, has the JVM print
# the killed wait of each other member: `Exception in thread "accept-connections"
# org.apache.spark.TaskKilledException: ...`, a message (which may quote the failure's
# Python traceback), then its stack. tfyard has said the failure in one line already.
_JVM_TEARDOWN = b'Exception in thread "accept-connections" org.apache.spark.TaskKilledException'
_JVM_MESSAGE_MAX = 400   # lines held for a message before it is judged not to be one


class JvmTeardownHold:
    """Drops the JVM's report of a barrier task killed at a stage's cancellation: its header,
    its message and its stack (tab-indented `at ...` and `... N more` lines, and `Caused by:`)."""

    def __init__(self):
        self.held: list[bytes] = []
        self.stack = False   # inside the `\tat` lines (else the message, before them)

    def split(self, lines: list[bytes]) -> tuple[list[bytes], list[bytes]]:
        keep, drop = [], []
        for line in lines:
            if not self.held:
                if line.startswith(_JVM_TEARDOWN):
                    self.held, self.stack = [line], False
                else:
                    keep.append(line)
                continue
            framed = line.startswith((b"\tat ", b"\t... "))
            if self.stack and not framed and not line.startswith(b"Caused by: "):
                drop.extend(self.held)   # the report ended before this line
                self.held = []
                keep.extend(self.split([line])[0])
                continue
            self.held.append(line)
            self.stack = framed or (self.stack and not line.startswith(b"Caused by: "))
            if not self.stack and len(self.held) > _JVM_MESSAGE_MAX:
                keep.extend(self.held)   # no stack came: not the report, passed on
                self.held = []
        return keep, drop

    def release(self) -> list[bytes]:
        """At the stream's end: a report whose stack began is dropped, else passed on."""
        held, self.held = self.held, []
        return [] if self.stack else held


def run_filter(source: int = 0, sink: int = 1) -> None:
    """The filter process: copy `source` to `sink` less TensorFlow's log lines (and Spark's
    teardown traceback), until EOF; the dropped lines go to the file TFYARD_TF_LOG names."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    outputs = {True: sink, False: _open_log(os.environ.get(LOG_FILE_ENV))}
    pending, dropping, tracebacks, jvm = b"", False, TracebackHold(), JvmTeardownHold()
    while chunk := os.read(source, 65536):
        # A new chunk starts a new write unless the last one ended mid-line.
        dropping = dropping and bool(pending)
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        keep, drop, dropping = split_log_lines(lines, dropping)
        keep, killed = jvm.split(keep)
        keep, teardown = tracebacks.split(keep)
        _emit(outputs, keep, drop + killed + teardown, b"\n")
    _emit(outputs, tracebacks.split(jvm.release())[0] + tracebacks.release(), [], b"\n")
    keep, drop, _ = split_log_lines([pending] if pending else [], dropping)
    _emit(outputs, keep, drop, b"")


def _emit(outputs: dict, keep: list[bytes], drop: list[bytes], end: bytes) -> None:
    """Kept lines to outputs[True], dropped ones to outputs[False]; a gone reader is None."""
    for kept, part in ((True, keep), (False, drop)):
        if part and outputs[kept] is not None:
            if not _write_all(outputs[kept], b"".join(line + end for line in part)):
                outputs[kept] = None


def _open_log(path: str | None) -> int | None:
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
    except OSError:
        return None


def _write_all(fd: int, data: bytes) -> bool:
    """Write everything; False once the reader is gone (then the rest is read and dropped)."""
    while data:
        try:
            data = data[os.write(fd, data):]
        except OSError:
            return False
    return True

