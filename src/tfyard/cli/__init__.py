"""`tfyard <command>`: parse arguments, call one library function, print.

Each command group lives in its own module with a `register(subparsers)` function; the
modules import TensorFlow only inside their handlers, so `tfyard --help` stays fast.
`forkserver.py` is no command: the warm process tune forks its `tfyard train` trials from.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import signal
import sys

from tfyard import __version__, keras_startup, quiet
from tfyard.data import release
from tfyard.distribute.coordination import end_together
from tfyard.errors import RESUME_FIX, UserError, disk_error
from tfyard.flags import Parser
from tfyard.train.outside.console import configure_console

# (module, command) pairs in the order `tfyard --help` lists them.
COMMAND_MODULES = ("cluster", "train", "tune", "predict", "launch", "pack", "models", "data",
                   "bench")
# What a failing disk asks of the user, by command: for predict, --output_dir is the input.
DISK_FIXES = {
    "train": RESUME_FIX,
    "launch": RESUME_FIX,
    "predict": "free space or choose a writable --output, then rerun (a previous output is "
               "untouched)",
}
OTHER_DISK_FIX = "free space or choose a writable place, then rerun"


def build_parser() -> Parser:
    parser = Parser(
        prog="tfyard",
        description="Run TensorFlow image-classification training unchanged at every scale: "
        "one CPU, one or many GPUs, all-reduce or parameter-server clusters, Spark, containers.",
    )
    parser.add_argument("--version", action="version", version=f"tfyard {__version__}")
    parser.add_argument("--verbose", action="store_true",
                        help=f"also show TensorFlow's own log lines (env {quiet.VERBOSE_ENV}=1)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(f"tfyard.cli.{name}").register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    keras_startup.skip_optional_imports()
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not hasattr(args, "train_argv"):   # only `tune` passes flags on (to train)
        parser.innermost(sys.argv[1:] if argv is None else argv).error(
            f"unrecognized arguments: {' '.join(rest)}")
    if rest:
        args.train_argv = rest
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    quiet.setup(args.verbose)
    # a --json answer is the only thing on stdout: no progress lines beside it
    configure_console(quiet=getattr(args, "quiet", False) or getattr(args, "json", False))
    try:
        status = args.func(args) or 0
        if status == 0:
            end_together()  # all-reduce members leave together: no "tasks have crashed"
        return status
    except UserError as exc:
        print(f"tfyard: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tfyard: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tfyard predict ... | head`: the reader has had enough
        return _closed_pipe()
    except Exception as exc:  # a full or read-only disk anywhere: the OS's words, one line
        error = disk_error(exc, "write to disk", DISK_FIXES.get(args.command, OTHER_DISK_FIX))
        if error is None:
            raise
        print(f"tfyard: error: {error}", file=sys.stderr)
        return 2


def _closed_pipe() -> int:
    """End quietly, as a Unix tool killed by SIGPIPE does (status 141 in the shell): stdout
    points at /dev/null, so the interpreter's last flush finds no closed pipe to complain of."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def run(status: list[int] | None = None) -> None:
    """The `tfyard` command (the console script, `python -m tfyard`): `main`, then the
    process ends once Python's exit has run what it must (the non-daemon threads joined,
    the exit handlers the command registered run, the logs flushed), without the
    interpreter's teardown after it. That teardown frees TensorFlow's objects one by one:
    ~1 s of a training process's end, and up to a minute where it frees a tf.data iterator
    whose autotuning thread sleeps (`data.release`). `status`: the holder of `ends_last`,
    where the process registered the end before its imports (the fork server)."""
    if status is None:
        status = ends_last()
    release.skip_at_exit()
    try:
        status[0] = main()
    except SystemExit as exc:   # argparse's --help and usage errors
        status[0] = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        raise
    sys.exit(status[0])


def ends_last() -> list[int]:
    """Register the process's end as an exit handler, the first one so that it runs last,
    after those of every module imported after this call; the holder of the exit status
    that `run` fills (1 until its command returns: an uncaught exception's traceback)."""
    status = [1]
    atexit.register(_end_now, status)
    return status


def _end_now(status: list[int]) -> None:
    logging.shutdown()   # its own exit handler was registered before ours: it would not run
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # closed, or a reader gone: nothing left to say
            pass
    os._exit(status[0])


if __name__ == "__main__":
    run()
