"""One writer per run directory, and Ctrl-C that saves, with real `tfyard train` processes.

Steps lost are measured as in test_preemption.py: the checkpoint interval is far beyond the
run, so a checkpoint at the step a run reached can only be the interrupt's save. The runs
that are signalled, killed or hold the lease are fresh processes; the refused writers, the
readers and the reruns that finish go through the CLI's `main` in the test's process."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import run_here
from tests.reliability.conftest import latest_checkpoint_step, member_pid, start_job, wait_for
from tests.reliability.test_preemption import STEPS, finish, resume_here, train_alone, train_steps
from tests.train.conftest import FAST, read_json
from tfyard.runfiles.layout import LEASE as LEASE_FILE

# Long enough that each run is still training when the test signals or kills it (60 steps
# train in 1-3 s; the refused second writer runs in this process, so the first run is
# interrupted within a few records: at step 15 on a loaded machine), short enough that the
# rerun which finishes it here trains little (~60 ms of CPU a step).
LONG = ["--train_steps", "120", *STEPS[2:]]
INTERRUPTED = re.compile(r"tfyard: interrupted at step (\d+); saved checkpoint ckpt-\1; rerun "
                         r"to resume \(exit 130\)")


def snapshot(directory) -> dict:
    return {str(path): (path.stat().st_mtime_ns, path.read_bytes() if path.is_file() else b"")
            for path in sorted(directory.rglob("*"))}


def files(directory) -> dict:
    """Every file's bytes by relative name (the lease's renewals change only its mtime), but
    checkpoints/: the holder may save at an epoch end while the second writer starts."""
    return {str(path.relative_to(directory)): path.read_bytes()
            for path in sorted(directory.rglob("*"))
            if path.is_file() and path.relative_to(directory).parts[0] != "checkpoints"}


def test_a_live_holder_is_refused_at_once_touching_nothing(tmp_path, digits_work, capsys):
    holder = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "logs").mkdir()
        (tmp_path / "work").mkdir()
        stat = open(f"/proc/{holder.pid}/stat").read().rsplit(")", 1)[1].split()[19]
        (tmp_path / LEASE_FILE).write_text(json.dumps({
            "host": socket.gethostname(), "pid": holder.pid, "pid_start": stat,
            "started": time.time(), "job": None, "token": "theirs"}))
        before = snapshot(tmp_path)
        started = time.monotonic()
        refused = run_here(capsys, "train", *FAST, "--output_dir", tmp_path, "--work_dir",
                           digits_work, "--train_steps", "5")
        took = time.monotonic() - started
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert refused.stderr.strip() == refused.stderr.strip().splitlines()[-1]  # one line
        assert f"is in use by another run (host {socket.gethostname()}, pid {holder.pid}, " \
               "started " in refused.stderr and "another --output_dir" in refused.stderr
        assert took < 15, took
        assert snapshot(tmp_path) == before
    finally:
        holder.kill()
        holder.wait()


def test_second_writer_refused_ctrl_c_saves_and_a_killed_holder_never_blocks(tmp_path,
                                                                             digits_work,
                                                                             capsys):
    first = train_alone(tmp_path, digits_work, LONG)
    wait_for(lambda: len(train_steps(tmp_path)) >= 1, first)
    before = files(tmp_path)
    started = time.monotonic()
    second = run_here(capsys, "train", *FAST, "--output_dir", tmp_path, "--work_dir",
                      digits_work, "--no_export", *LONG)
    took = time.monotonic() - started
    assert second.returncode == 2 and f"pid {first.pid}," in second.stderr, second.stderr
    assert took < 20 and first.poll() is None, took         # refused at once, mid-training
    after = files(tmp_path)
    assert after.keys() == before.keys()                   # no name created or removed
    for name, data in before.items():     # the first run only appends; its lease unchanged
        grows = name == "metrics.jsonl" or "tfevents" in name
        assert after[name].startswith(data) if grows else after[name] == data, name
    reached = len(train_steps(tmp_path))
    wait_for(lambda: len(train_steps(tmp_path)) > reached, first)   # and the first trains on
    first.send_signal(signal.SIGINT)                        # Ctrl-C: save, exit 130
    output = finish(first, 130)
    step = int(INTERRUPTED.search(output).group(1))
    steps = train_steps(tmp_path)
    assert steps == sorted(set(steps))                     # one writer: no step twice
    assert latest_checkpoint_step(tmp_path) == step == steps[-1] < 120   # 0 steps lost
    assert not (tmp_path / LEASE_FILE).exists()            # released at exit
    killed = train_alone(tmp_path, digits_work, LONG)       # resumes, then SIGKILL
    wait_for(lambda: len(train_steps(tmp_path)) > len(steps), killed)
    killed.kill()
    killed.wait()
    assert (tmp_path / LEASE_FILE).exists()                # left behind by the kill
    resume_here(capsys, tmp_path, digits_work, LONG)       # takes the lease over
    summary = read_json(tmp_path / "summary.json")
    assert summary["final_step"] == 120 and summary["resumed_from_step"] >= step


def test_readers_are_never_blocked_by_a_live_holder_whose_second_ctrl_c_exits_at_once(
        tmp_path, digits_work, capsys):
    """One live holder for both: `evaluate` and `plot` read its run while it trains on and
    holds the lease; then two Ctrl-Cs, the second of which exits at once, and the previous
    checkpoint still evaluates."""
    command = [sys.executable, "-m", "tfyard", "train", *FAST, "--output_dir", tmp_path,
               "--work_dir", digits_work, "--no_export", "--train_steps", "5000",
               "--checkpoint_every_steps", "50", "--keep_checkpoints", "200",
               "--eval_every_epochs", "1000",   # no rotation: a read checkpoint stays
               "--steps_per_loop", "50"]   # chunks of ~1 s: the second Ctrl-C lands in one
    proc = subprocess.Popen(list(map(str, command)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wait_for(lambda: latest_checkpoint_step(tmp_path) >= 50, proc)
    evaluated = run_here(capsys, "evaluate", "--output_dir", tmp_path)
    plotted = run_here(capsys, "plot", "--output_dir", tmp_path)
    assert proc.poll() is None                               # the lease was held throughout
    assert json.loads((tmp_path / LEASE_FILE).read_text())["pid"] == proc.pid
    for reader in (evaluated, plotted):
        assert reader.returncode == 0 and "in use by another run" not in reader.stderr, \
            reader.stderr[-2000:]
    assert (tmp_path / "curves.png").stat().st_size > 0
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)   # two signals sent at once would merge into one
    proc.send_signal(signal.SIGINT)                # the second: now, saving or not
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output[-3000:]
    # almost always inside the chunk or the save; in the rare case that the first one's save
    # was already done, the second is ignored and the exit stays 130
    assert ("interrupted again; stopped without saving" in output
            or "saved checkpoint" in output), output[-3000:]
    assert "Traceback" not in output
    evaluated = run_here(capsys, "evaluate", "--output_dir", tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]


@pytest.mark.cluster
def test_launcher_restart_is_not_blocked_and_ctrl_c_on_launch_local_saves(tmp_path,
                                                                          digits_work,
                                                                          capsys):
    proc = start_job(tmp_path, digits_work, ["--workers", "2", "--grace_period", "60"],
                     *STEPS, max_restarts=1)
    wait_for(lambda: len(train_steps(tmp_path)) >= 1 and member_pid(proc.pid, "worker", 0),
             proc)
    holder = member_pid(proc.pid, "worker", 0)            # worker:0 holds the lease
    os.kill(holder, signal.SIGKILL)
    wait_for(lambda: member_pid(proc.pid, "worker", 0) not in (None, holder), proc)
    before = len(train_steps(tmp_path))
    wait_for(lambda: len(train_steps(tmp_path)) >= before + 1, proc)   # the restart trains
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=600)[0]
    assert proc.returncode == 130, output[-4000:]
    # worker:1's collective fails when its peer is killed; after the restart all is clean
    output = output.split("tfyard: restarting the job (1/1)")[1]
    assert "SIGINT received" in output and "Traceback" not in output, output[-4000:]
    saved = {int(n) for n in INTERRUPTED.findall(output)}
    assert len(saved) == 1 and len(INTERRUPTED.findall(output)) == 2, output[-4000:]
    step = saved.pop()
    assert latest_checkpoint_step(tmp_path) == step == train_steps(tmp_path)[-1]
    resume_here(capsys, tmp_path, digits_work, STEPS)
    summary = read_json(tmp_path / "summary.json")
    assert (summary["resumed_from_step"], summary["final_step"]) == (step, 60)
