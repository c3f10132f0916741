"""`launch local` and preemption or frozen members, with a small stand-alone member program:
exit 143 restarts without spending a restart, SIGTERM to the launcher reaches the members
and waits for their save, and a stopped member is found by its heartbeat."""

from __future__ import annotations

import os
import re
import signal
import time

from tfyard.errors import PREEMPTED_EXIT_CODE

from .helpers import alive, follow, launch, program, recorded_pids, started_pid


def test_preempted_member_restarts_the_job_without_spending_a_restart(tmp_path):
    proc = launch("local", "--workers", 2, "--max_restarts", 0, "--grace", 1, "--",
                  *program("preemptible.py", "--pid_dir", tmp_path, "--preempt_once",
                           "worker:1", "--run_s", 3))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert f"tfyard: worker:1 was preempted (exit code {PREEMPTED_EXIT_CODE}: saved and " \
        "stopped)\ntfyard: restarting the job after a preemption (not counted against " \
        "--max_restarts)\n" in out
    pids = recorded_pids(tmp_path)
    assert [len(pids[m]) for m in ("worker:0", "worker:1")] == [2, 2]  # two attempts each


def test_sigterm_to_the_launcher_lets_members_save_then_exits_143(tmp_path):
    proc = launch("local", "--workers", 2, "--grace", 0.5, "--grace_period", 30, "--",
                  *program("preemptible.py", "--pid_dir", tmp_path, "--save_s", 2))
    deadline = time.monotonic() + 60
    while len(recorded_pids(tmp_path)) < 2:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    time.sleep(0.5)  # the SIGTERM handlers are in place right after the pid file
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == PREEMPTED_EXIT_CODE, out
    assert 2 <= time.monotonic() - sent < 30  # waited for the 2 s saves, not the 0.5 s grace
    assert "tfyard: SIGTERM received; members have 30s to save and exit" in out
    for member in ("worker:0", "worker:1"):
        assert (tmp_path / f"{member}.saved").exists(), out
        assert f"[{member}] {member}: saved" in out
    assert not any(alive(p) for ps in recorded_pids(tmp_path).values() for p in ps)


def test_a_stopped_member_is_named_killed_and_the_job_restarted(tmp_path):
    proc = launch("local", "--workers", 2, "--max_restarts", 1, "--hang_timeout", 2,
                  "--grace", 1, "--", *program("preemptible.py", "--pid_dir", tmp_path,
                                               "--run_s", 6))
    lines = follow(proc)
    deadline = time.monotonic() + 60
    while len(recorded_pids(tmp_path)) < 2:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    time.sleep(1.5)  # both beat
    victim = started_pid(lines, "worker:1")
    os.kill(victim, signal.SIGSTOP)
    stopped = time.monotonic()
    while not any("froze" in line for line in lines):
        assert time.monotonic() - stopped < 10, "".join(lines)
        time.sleep(0.1)
    assert time.monotonic() - stopped >= 2 - 1  # its last beat was up to 1 s before the stop
    assert proc.wait(timeout=60) == 0, "".join(lines)
    text = "".join(lines)
    assert re.search(r"tfyard: worker:1 froze: no heartbeat for [23]s \(--hang_timeout 2\); "
                     r"killed it\ntfyard: restarting the job \(1/1\)\n", text), text
    assert "worker:0 froze" not in text
    assert not alive(victim)


def test_a_member_failing_because_its_peer_is_stopped_names_the_stopped_peer(tmp_path):
    """TensorFlow makes the healthy member exit 1 once a peer is silent for 10 s; the
    launcher names the silent one, even long before its --hang_timeout."""
    proc = launch("local", "--workers", 2, "--max_restarts", 0, "--hang_timeout", 300,
                  "--grace", 1, "--", *program("preemptible.py", "--pid_dir", tmp_path,
                                               "--fail", "worker:0:9"))
    lines = follow(proc)
    deadline = time.monotonic() + 60
    while len(recorded_pids(tmp_path)) < 2:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    time.sleep(1)
    victim = started_pid(lines, "worker:1")
    os.kill(victim, signal.SIGSTOP)
    assert proc.wait(timeout=60) == 128 + signal.SIGKILL, "".join(lines)
    text = "".join(lines)
    assert re.search(r"tfyard: worker:1 froze: no heartbeat for \d+s \(then worker:0 failed "
                     r"with exit code 1\); killed it\n", text), text
    assert "[worker:0] worker:0: my peer stopped answering" in text
    assert not alive(victim)
