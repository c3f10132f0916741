"""Liveness of real processes: running, stopped, a zombie, gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.process import until
from tfyard.process import liveness


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()



def test_a_running_process_lives_with_its_kernel_start_time(child):
    assert liveness.alive(child.pid)
    started = liveness.start_time(child.pid)
    with open(f"/proc/{child.pid}/stat") as handle:
        assert started == handle.read().rsplit(")", 1)[1].split()[19]
    assert liveness.start_time(child.pid) == started   # stable: tells a reused pid apart
    assert liveness.state(child.pid) in ("R", "S")


def test_a_stopped_process_is_alive_and_stopped(child):
    os.kill(child.pid, signal.SIGSTOP)
    assert until(lambda: liveness.state(child.pid) == "T")
    assert liveness.alive(child.pid)
    os.kill(child.pid, signal.SIGCONT)


def test_a_killed_process_not_yet_reaped_is_a_zombie_then_gone(child):
    child.kill()
    assert until(lambda: liveness.state(child.pid) == "Z")
    assert liveness.alive(child.pid)   # its pid is still taken
    child.wait()
    assert not liveness.alive(child.pid)
    assert liveness.start_time(child.pid) is None
    assert liveness.state(child.pid) is None


def test_this_process_lives():
    assert liveness.alive(os.getpid())
    assert liveness.start_time(os.getpid()).isdecimal()
    assert liveness.state(os.getpid()) == "R"
