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

This module routes the descriptors; the filter process itself is `quiet.log_filter`, and
the Python log records and warnings tfyard drops are `quiet.python_noise`.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import signal
import sys
import threading
import traceback

from tfyard.quiet.log_filter import LOG_FILE_ENV
from tfyard.quiet.python_noise import drop_python_noise

VERBOSE_ENV = "TFYARD_VERBOSE"
# Environment a quiet process runs with (a value the user set wins): TensorFlow's own sink
# drops INFO and WARNING at the source, so less goes through the filter.
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}
_TRIGGERS = ("tensorflow", "keras", "tf_keras")

# The filter process runs `log_filter.run_filter()`, without site-packages or PYTHON*
# variables (-I), with tfyard's parent directory first on sys.path.
_FILTER_MAIN = ("import sys; sys.path.insert(0, sys.argv[1]); "
                "from tfyard.quiet.log_filter import run_filter; run_filter()")

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
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))   # tfyard/quiet/__init__.py: tfyard's parent
        return os.posix_spawn(sys.executable, [sys.executable, "-I", "-c", _FILTER_MAIN,
                                               package_parent], os.environ,
                              file_actions=actions)
    finally:
        if ignored is not None:
            signal.signal(signal.SIGINT, ignored)


def _flush(stream) -> None:
    try:
        stream.flush()
    except (AttributeError, OSError, ValueError):
        pass



class _ImportHook:
    """A meta-path finder that installs the filter just before TensorFlow is imported."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in _TRIGGERS:
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
            install()
        return None
