"""Zero-loss preemption with real TensorFlow processes: SIGTERM to a single process, to one
all-reduce member, to the launcher, and to a parameter-server chief; and a lost ps task.

Steps lost are measured: the step a run had reached when it stopped (its last metrics
record) minus the step the next attempt resumed from. The checkpoint interval is far
beyond the run, so a checkpoint at the stopping step can only be the SIGTERM save. The
signalled runs are fresh processes; a rerun that only has to resume and finish goes through
the CLI's `main` in the test's process (on one device, also after an all-reduce job)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from tests.conftest import run_here
from tests.reliability.conftest import latest_checkpoint_step, member_pid, start_job, wait_for
from tests.train.conftest import FAST, read_json, read_jsonl
from tests.train.task.test_user_models import MODELS
from tests.train.test_clusters import ASYNC
from tfyard.errors import PREEMPTED_EXIT_CODE

STEPS = ["--train_steps", "60", "--checkpoint_every_steps", "1000", "--eval_every_epochs",
         "100"]
PREEMPTED = re.compile(r"tfyard: preempted at step (\d+); saved checkpoint ckpt-(\d+); rerun "
                       r"to resume \(exit 143\)")


def train_steps(output_dir) -> list[int]:
    path = output_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [r["step"] for r in read_jsonl(path) if r["kind"] == "train"]


def signal_then_restart(proc, output_dir, task: tuple[str, int], signum, records=2,
                        timeout=300) -> int:
    """Send `signum` to a member once it trained, wait until the launcher started that member
    again; returns how many metrics records the first attempt wrote (its members are all
    stopped before the restart)."""
    wait_for(lambda: len(train_steps(output_dir)) >= records
             and member_pid(proc.pid, *task) is not None, proc, timeout)
    victim = member_pid(proc.pid, *task)
    os.kill(victim, signum)
    wait_for(lambda: member_pid(proc.pid, *task) not in (None, victim), proc, timeout)
    return len(train_steps(output_dir))


def saved_step(output: str) -> int:
    found = {int(a) for a, b in PREEMPTED.findall(output) if a == b}
    assert len(found) == 1, output[-4000:]
    return found.pop()


def train_alone(output_dir, work_dir, steps=STEPS) -> subprocess.Popen:
    command = [sys.executable, "-m", "tfyard", "train", *FAST, "--output_dir", output_dir,
               "--work_dir", work_dir, "--no_export", *steps]
    return subprocess.Popen(list(map(str, command)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def finish(proc, code=0) -> str:
    output = proc.communicate(timeout=600)[0]
    assert proc.returncode == code, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    return output


def resume_here(capture, output_dir, work_dir, steps=STEPS) -> str:
    """Rerun `tfyard train` on output_dir in this process; it must finish; its stdout."""
    rerun = run_here(capture, "train", *FAST, "--output_dir", output_dir, "--work_dir",
                     work_dir, "--no_export", *steps)
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    assert "Traceback" not in rerun.stderr, rerun.stderr[-4000:]
    return rerun.stdout


def test_sigterm_to_a_single_process_saves_where_it_stopped_and_loses_nothing(tmp_path,
                                                                             digits_work,
                                                                             capsys):
    proc = train_alone(tmp_path, digits_work)
    wait_for(lambda: len(train_steps(tmp_path)) >= 2, proc)
    proc.send_signal(signal.SIGTERM)
    step = saved_step(finish(proc, PREEMPTED_EXIT_CODE))
    reached = train_steps(tmp_path)[-1]
    assert latest_checkpoint_step(tmp_path) == step == reached < 60  # 0 steps lost
    assert read_json(tmp_path / "summary.json")["stop_reason"] == "preempted"
    assert not (tmp_path / "export").exists()
    resume_here(capsys, tmp_path, digits_work)
    summary = read_json(tmp_path / "summary.json")
    assert (summary["resumed_from_step"], summary["final_step"]) == (step, 60)
    assert summary["stop_reason"] is None


@pytest.mark.cluster
def test_sigterm_to_an_all_reduce_worker_then_to_the_launcher_loses_nothing(tmp_path,
                                                                            digits_work,
                                                                            capsys):
    proc = start_job(tmp_path, digits_work, ["--workers", "2", "--grace_period", "60"],
                     *STEPS, max_restarts=0)
    # The job restarts without a credit (--max_restarts 0); once it trains again, the
    # launcher itself is preempted.
    before = signal_then_restart(proc, tmp_path, ("worker", 1), signal.SIGTERM)
    wait_for(lambda: len(train_steps(tmp_path)) >= before + 2, proc)
    proc.send_signal(signal.SIGTERM)
    output = finish(proc, PREEMPTED_EXIT_CODE)
    # Both members stop after the same chunk; the launcher names the first to exit.
    assert re.search(r"tfyard: worker:[01] was preempted \(exit code 143: saved and stopped\)",
                     output), output[-4000:]
    assert "restarting the job after a preemption (not counted" in output, output[-4000:]
    steps = train_steps(tmp_path)
    first, second = steps[before - 1], steps[-1]   # the steps each attempt reached
    saved = [int(n) for n, _ in PREEMPTED.findall(output)]
    assert saved == [first, first, second, second], output[-4000:]  # each member
    assert first < steps[before] <= first + 5  # resumed at `first`: 0 steps lost
    assert latest_checkpoint_step(tmp_path) == second  # 0 lost again
    resume_here(capsys, tmp_path, digits_work)
    summary = read_json(tmp_path / "summary.json")
    assert (summary["resumed_from_step"], summary["final_step"]) == (second, 60)


@pytest.mark.cluster
def test_parameter_server_chief_sigterm_loses_nothing_and_a_lost_ps_restarts(tmp_path,
                                                                             digits_work):
    proc = start_job(tmp_path, digits_work, ["--chief", "--workers", "1", "--ps", "1"],
                     *ASYNC, *STEPS, "--eval_every_epochs", "0.25",
                     "--model", f"{MODELS}:compiled", max_restarts=1)   # the user's, compiled
    before = signal_then_restart(proc, tmp_path, ("chief", 0), signal.SIGTERM, records=1,
                                 timeout=600)  # PS start-up is slow on 2 busy cores
    first = train_steps(tmp_path)[before - 1]
    signal_then_restart(proc, tmp_path, ("ps", 0), signal.SIGKILL, records=before + 1,
                        timeout=600)
    output = finish(proc)
    assert "tfyard: chief:0 was preempted (exit code 143: saved and stopped)" in output
    assert "tfyard: ps:0 failed with signal SIGKILL" in output
    assert "Traceback" not in output   # the chief, if it noticed first: one line (issue 43)
    assert "tfyard: restarting the job (1/1)" in output
    assert saved_step(output) == first  # 0 steps lost: saved where it stopped
    steps = train_steps(tmp_path)
    assert first < steps[before]  # resumed there (PS reports at boundaries, not every chunk)
    summary = read_json(tmp_path / "summary.json")
    assert summary["final_step"] == 60 and summary["resumed_from_step"] >= first
    # the user's compiled model on a parameter-server cluster (moved from test_clusters.py):
    # trained as compiled, its own optimizer and metric reported
    assert (summary["strategy"], summary["model"]) == ("parameter_server", f"{MODELS}:compiled")
    assert summary["optimizer"] == "Adam" and set(summary["eval"]) == {"loss", "accuracy"}
    last = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["kind"] == "train"][-1]
    assert last["step"] == 60 and "accuracy" in last
