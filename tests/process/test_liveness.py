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


def test_ended_is_gone_a_zombie_or_a_process_whose_main_thread_left_never_a_live_one(child):
    """Issue 67: a holder killed a moment ago is a zombie, or still being torn down (its
    main thread gone, others leaving): it runs none of its code, so it has ended."""
    started = liveness.start_time(child.pid)
    assert not liveness.ended(child.pid, started, wait=0.5)   # SIGKILL not pending: no wait
    assert liveness.ended(child.pid, "another start")         # the pid reused
    child.kill()
    assert until(lambda: liveness.state(child.pid) == "Z")
    assert liveness.ended(child.pid, started)
    child.wait()
    assert liveness.ended(child.pid, started)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="exit(2)'s number is x86-64's")
def test_a_process_whose_main_thread_exited_has_ended():
    proc = subprocess.Popen([sys.executable, "-c", (
        "import ctypes, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,)).start()\n"
        "ctypes.CDLL(None).syscall(60, 0)   # exit(2): the main thread alone\n")])
    try:
        started = liveness.start_time(proc.pid)
        assert until(lambda: liveness.state(proc.pid) == "Z")
        assert liveness.alive(proc.pid)   # another thread still runs
        assert liveness.ended(proc.pid, started)
    finally:
        proc.kill()
        proc.wait()
