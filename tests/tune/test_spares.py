"""Spare trial processes (`tune.trial.Spares`, `cli.spare`): a spare has loaded TensorFlow
before it is handed a command; it runs the `tfyard train` command line it is handed, with
that command's output and exit status, in a process group of its own; the next spare is
made ready only when more trials may follow; one no trial took ends when tune closes the
spares; a command that is not `tfyard train` (a stand-in, Ray's launcher) runs as a process
of its own."""

from __future__ import annotations

import os
import sys
import time

from tfyard.tune.trial import TRAIN, Spares


def test_a_spare_runs_the_command_it_is_handed_and_the_next_is_readied():
    spares = Spares(dict(os.environ))
    first = spares.process([*TRAIN, "--model", "resnet_999"], more=True)
    assert os.getpgid(first.pid) == first.pid   # its own group, as a trial's process
    assert first.wait(120) == 2   # train's exit status for a user error
    output = first.stdout.read().decode()
    assert "unknown model" in output and "Traceback" not in output
    first.stdout.close()
    first.guard.stdin.close()

    ready = spares.ready   # made ready for the next trial, waiting for its command
    assert ready is not None
    deadline = time.monotonic() + 120
    while not tensorflow_loaded(ready.pid):
        assert ready.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(1)
    assert ready.poll() is None   # still waiting
    spares.close()
    assert ready.returncode is not None and spares.ready is None


def tensorflow_loaded(pid: int) -> bool:
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
        return "libtensorflow" in maps.read()


def test_a_command_other_than_train_runs_on_its_own_and_readies_no_spare():
    spares = Spares(dict(os.environ))
    proc = spares.process([sys.executable, "-c", "print('stand-in')"], more=True)
    assert proc.wait(60) == 0 and proc.stdout.read() == b"stand-in\n"
    proc.stdout.close()
    proc.guard.stdin.close()
    assert spares.ready is None
