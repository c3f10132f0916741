"""Keep TensorFlow's C++ log lines off the terminal; `--verbose` / TFYARD_VERBOSE=1 shows them.

TensorFlow 2.21 prints its C++ (absl) log lines straight to file descriptor 2, several of
them before `absl::InitializeLog()` runs, so `TF_CPP_MIN_LOG_LEVEL` cannot hide them all:
`cudart_stub.cc ... Could not find cuda drivers` and the `All log messages before
absl::InitializeLog()` banner come out even at level 3. What works is a filter on the
descriptor itself, set up before TensorFlow is imported:

* fd 2 becomes a pipe read by a small filter process that drops the C++ log lines of
  levels I, W and E (with their continuation lines) and the absl banner, and forwards
  everything else, FATAL lines included, to the real stderr;
* Python's own `sys.stderr` (tracebacks, `warnings`, our one-line errors) is re-opened on
  the real stderr, so it never passes through the filter.

The filter is a separate process, not a thread, so nothing is lost at an abort or in
C++ teardown: it reads until every writer is gone and ignores SIGINT/SIGTERM meanwhile.
A member started under `tfyard launch local` inherits TFYARD_VERBOSE with the environment.
TFYARD_TF_LOG=FILE appends the hidden lines to FILE (what reaches the filter: TensorFlow's
own sink already drops INFO and WARNING, see QUIET_ENV). A crash's traceback ends with a
line saying how to see them.

    quiet.setup(verbose)        # entry points: filter as soon as anything imports TensorFlow
    tf = quiet.import_tensorflow()

In a process tfyard does not own (a model that MLflow loads and serves), the filter is not
tfyard's to set up for the whole process; `with quiet.hushed():` routes fd 2 through the
same filter for one block only (importing TensorFlow and loading a model).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import re
import signal
import sys
import threading
import traceback
import warnings

VERBOSE_ENV = "TFYARD_VERBOSE"
# Where the hidden lines go, if anywhere (appended; members of a job may share it).
LOG_FILE_ENV = "TFYARD_TF_LOG"
# A C++ log line: level, MMDD, time (seconds since the epoch before absl is initialised),
# thread id, file:line].
LOG_PREFIX = r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] "
ABSL_BANNER = ("WARNING: All log messages before absl::InitializeLog() is called are written "
               "to STDERR")
# Environment a quiet process runs with (a value the user set wins): TensorFlow's own sink
# drops INFO and WARNING at the source, so less goes through the filter.
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}
# Python log records that are TensorFlow/Keras noise to a tfyard user, caused by what tfyard
# itself does: (logger, a pattern matched at the start of the message).
PYTHON_NOISE = (
    # Keras calling the model.h5 that tfyard writes "legacy".
    ("absl", r"You are saving your model as an HDF5 file"),
    # A parameter-server chief's checkpoint save: TensorFlow's MultiDeviceSaver wraps every
    # save across tasks in a new tf.function, on purpose (its source: "the retrace is needed
    # to ensure we pickup the latest values of options"), so the 5th save warns of
    # retracing (4 lines of ~600 characters). Nothing the user can change; it costs ~0.12 s
    # a save for ResNet-8 on 2 cores (see docs/architecture.md).
    ("tensorflow", r"\d+ out of the last \d+ calls to <function MultiDeviceSaver\.save\."),
    # The local Ray that `launch ray` / `predict --on ray` start turns token authentication
    # on and says so; a Ray without it still warns.
    ("ray._private.authentication.authentication_token_setup",
     r"Token authentication is enabled for this Ray cluster"),
)
# Python warnings of the same kind: (category, a pattern matched at the start of the text).
PYTHON_WARNINGS = (
    # --seed under parameter-server training: the per-worker input is traced inside the
    # coordinator's function, whose graph seed its augmentations then use. Harmless: a PS
    # run's input order is not seeded anyway (docs/faults.md, "Exact resume").
    (UserWarning, r"Seed \d+ from outer graph might be getting used by function Dataset_"),
)
_TRIGGERS = ("tensorflow", "keras", "tf_keras")
_LOG = re.compile(("^" + LOG_PREFIX).encode())
_BANNER = ABSL_BANNER.encode()
# One-line notices of other runtimes on fd 2, dropped alone: Spark 4's JVM announcing the
# vector module it adds to every driver (`launch spark`, `predict --on spark`).
_NOTICES = (b"WARNING: Using incubator modules: ",)
# A traceback PySpark's worker daemon prints when the JVM drops a worker's connection as the
# SparkContext stops after a failed job (teardown, after tfyard's own one-line error).
_TRACEBACK = b"Traceback (most recent call last):"
_TEARDOWN = (b"pyspark/daemon.py", (b"ConnectionResetError", b"BrokenPipeError", b"EOFError"))

# The filter process runs `run_filter()` from this file, without site-packages or
# PYTHON* variables (-I), with this package's parent directory first on sys.path.
_FILTER_MAIN = ("import sys; sys.path.insert(0, sys.argv[1]); "
                "from tfyard.quiet import run_filter; run_filter()")

_installed = False


def is_verbose(environ=None) -> bool:
    """Whether TFYARD_VERBOSE asks for TensorFlow's own log lines."""
    value = (os.environ if environ is None else environ).get(VERBOSE_ENV, "")
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def setup(verbose: bool = False) -> None:
    """Entry points call this first: quiet from the first TensorFlow import on, unless
    `verbose` (or TFYARD_VERBOSE) is set, which is then passed on to child processes."""
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
    if is_verbose() or _installed:
        return
    if any(name in sys.modules for name in _TRIGGERS):
        install()
    elif not any(isinstance(f, _ImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _ImportHook())


def import_tensorflow():
    """`import tensorflow`, quietly unless TFYARD_VERBOSE is set; returns the module."""
    setup()
    install()
    return importlib.import_module("tensorflow")


def drop_python_noise() -> None:
    """Drop the Python log records and warnings tfyard itself causes (PYTHON_NOISE,
    PYTHON_WARNINGS), once per logger; also where TensorFlow's own lines are left alone
    (`tfyard.fit` in the user's process)."""
    for logger, start in PYTHON_NOISE:
        filters = logging.getLogger(logger).filters
        if not any(isinstance(f, _DropMessage) and f.start == start for f in filters):
            logging.getLogger(logger).addFilter(_DropMessage(start))
    for category, start in PYTHON_WARNINGS:
        warnings.filterwarnings("ignore", message=start, category=category)


def install() -> bool:
    """Route fd 2 through the log filter now (idempotent); False when verbose or not possible."""
    global _installed
    if _installed or is_verbose() or os.name != "posix":
        return _installed
    if sys.stderr is not sys.__stderr__:  # someone (pytest, redirect_stderr) owns stderr
        return False
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    drop_python_noise()
    try:
        real = os.dup(2)
    except OSError:  # no stderr at all: nothing to protect
        return False
    read, write = os.pipe()
    try:
        _spawn_filter(read, real)
    except OSError:
        os.close(write)
        os.close(real)
        return False
    finally:
        os.close(read)
    _flush(sys.stderr)
    os.dup2(write, 2)
    os.close(write)
    sys.stderr = io.TextIOWrapper(io.FileIO(real, "w"), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True,
                                  write_through=True)
    sys.excepthook = _with_hint(sys.excepthook)
    _installed = True
    return True


def after_fork() -> None:
    """In a process forked from a quiet one (tune's fork server), its fd 2 pointed elsewhere
    since: drop the parent's route to its filter, so that `setup` routes this process's own
    fd 2 through a filter of its own."""
    global _installed
    if _installed:
        sys.stderr.close()   # the parent's real stderr, duplicated
        sys.stderr, sys.excepthook, _installed = sys.__stderr__, sys.__excepthook__, False


@contextlib.contextmanager
def hushed():
    """TensorFlow's C++ log lines of this block kept off fd 2: the filter process of
    `install` reads fd 2 for the block only, then ends. Nothing is done when verbose or
    once the filter is installed for the whole process."""
    try:
        real = None if _installed or is_verbose() or os.name != "posix" else os.dup(2)
    except OSError:   # no stderr at all: nothing to keep clean
        real = None
    read, write = os.pipe() if real is not None else (None, None)
    try:
        filtering = real is not None and _spawn_filter(read, real)
    except OSError:
        filtering = None
    finally:
        if read is not None:
            os.close(read)
    if not filtering:
        for fd in (write, real):
            if fd is not None:
                os.close(fd)
        yield
        return
    _flush(sys.stderr)
    os.dup2(write, 2)
    os.close(write)
    try:
        yield
    finally:
        _flush(sys.stderr)
        os.dup2(real, 2)   # the pipe's last writer gone: the filter writes the rest, ends
        os.close(real)
        reaper = threading.Thread(target=os.waitpid, args=(filtering, 0), daemon=True)
        reaper.start()
        reaper.join(2.0)   # its lines before ours (a child that kept the pipe: not waited)


def _with_hint(excepthook):
    """After a crash's traceback, say where TensorFlow's hidden lines can be seen."""
    def hook(kind, value, tb):
        if excepthook is sys.__excepthook__:   # in one write: the filter's lines, written
            # to the same stderr by another process, cannot split it
            sys.stderr.write("".join(traceback.format_exception(kind, value, tb)))
        else:
            excepthook(kind, value, tb)
        if not issubclass(kind, KeyboardInterrupt):
            print(f"tfyard: TensorFlow's own log lines were hidden; `tfyard --verbose ...`, "
                  f"{VERBOSE_ENV}=1 or {LOG_FILE_ENV}=FILE shows them", file=sys.stderr)
    return hook


def _spawn_filter(read: int, real: int) -> int:
    """Start the filter (its pid): stdin the pipe, stdout/stderr the real stderr; it
    outlives us only while something still writes to the pipe."""
    actions = [(os.POSIX_SPAWN_DUP2, read, 0), (os.POSIX_SPAWN_DUP2, real, 1),
               (os.POSIX_SPAWN_DUP2, real, 2)]
    ignored = None
    try:  # no Ctrl-C window before the filter ignores SIGINT itself (main thread only)
        ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:
        pass
    try:
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        return os.posix_spawn(sys.executable, [sys.executable, "-I", "-c", _FILTER_MAIN,
                                               package_parent], os.environ,
                              file_actions=actions)
    finally:
        if ignored is not None:
            signal.signal(signal.SIGINT, ignored)


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


def _flush(stream) -> None:
    try:
        stream.flush()
    except (AttributeError, OSError, ValueError):
        pass


class _DropMessage(logging.Filter):
    def __init__(self, start: str):
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not re.match(self.start, record.getMessage())


class _ImportHook:
    """A meta-path finder that installs the filter just before TensorFlow is imported."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in _TRIGGERS:
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
            install()
        return None
