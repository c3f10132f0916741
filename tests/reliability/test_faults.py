"""Faults survived: members killed mid-training, cut-short saves, full disks, missing peers.

The real TensorFlow clusters of `tfyard launch local` are these: an all-reduce job restarted
whole under --max_restarts, and a chief, workers, a ps and an evaluator, one worker restarted
alone (tests/launch/test_local.py keeps the launcher's own promises on cheap members)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import run_tfyard
from tests.launch.helpers import alive
from tests.reliability.conftest import latest_checkpoint_step, member_pid, start_job, wait_for
from tests.train.conftest import FAST, assert_learned, read_json, read_jsonl
from tests.train.task.test_user_models import user_model
from tests.train.test_clusters import ASYNC

pytestmark = pytest.mark.cluster
# With --seed a resumed all-reduce job must end with the weights of an unbroken one, bit for
# bit (issue 14), so a short run is enough: the first fault lands after step 10, the second
# 10 steps or more after the first, and the steps after each (across the epoch boundaries at
# 46 and 92) leave room for a loaded machine to act before the end.
STEPS_TO, EPOCH_ENDS = 120, (46, 92)
STEPS = ["--train_steps", str(STEPS_TO), "--checkpoint_every_steps", "10"]
HANG_TIMEOUT = 5  # below the 10 s after which TensorFlow itself gives up on a silent peer


def kill_after_checkpoint(proc, output_dir, task_type, index, at_least=30):
    """SIGKILL task_type:index once a checkpoint at step `at_least` or later exists; returns
    that step."""
    wait_for(lambda: latest_checkpoint_step(output_dir) >= at_least
             and member_pid(proc.pid, task_type, index) is not None, proc)
    step = latest_checkpoint_step(output_dir)
    os.kill(member_pid(proc.pid, task_type, index), signal.SIGKILL)
    return step


@pytest.fixture(scope="module")
def unkilled(tmp_path_factory, digits_work):
    """The same two-worker job, never killed: the reference for the weights. The compiled
    user model: its own Adam and metrics, and Dropout (its seed-generator states must come
    back with the weights; the convnet's Dropout is the same layer, so one model checks
    both, and the convnet trains all-reduce through a killed member on Ray,
    tests/launch/test_ray.py); batch norm's exact resume across members is
    tests/reliability/test_exact_resume.py's, MobileNet trains all-reduce on Spark
    (tests/spark/test_spark.py)."""
    out = tmp_path_factory.mktemp("unkilled")
    proc = start_job(out, digits_work, ["--workers", "2"], *STEPS, *user_model("compiled"))
    output = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, output[-4000:]
    return read_json(out / "summary.json")


def test_a_frozen_then_a_killed_all_reduce_member_each_restart_the_job_exactly(
        tmp_path, digits_work, unkilled):
    """worker:1 SIGSTOPped: the other worker, blocked in the all-reduce, keeps beating
    (TensorFlow releases the GIL in collectives), the stopped one does not, so the launcher
    names it within --hang_timeout, kills it and restarts the job from its checkpoint. Then
    the restarted worker:1 SIGKILLed: named with its signal, the job restarted again; the
    survivor says so in at most one line. The run ends with the unkilled run's weights."""
    name = unkilled["model"].rpartition(":")[2]
    proc = start_job(tmp_path, digits_work, ["--workers", "2", "--hang_timeout",
                                             str(HANG_TIMEOUT)], *STEPS, *user_model(name),
                     max_restarts=2)
    wait_for(lambda: latest_checkpoint_step(tmp_path) >= 10
             and None not in (member_pid(proc.pid, "worker", 0),
                              member_pid(proc.pid, "worker", 1)), proc)
    stopped_at = latest_checkpoint_step(tmp_path)
    first = member_pid(proc.pid, "worker", 0), member_pid(proc.pid, "worker", 1)
    os.kill(first[1], signal.SIGSTOP)
    stopped = time.monotonic()
    lines = []
    for line in proc.stdout:  # the launcher's own lines come as they happen
        lines.append(line)
        if "froze" in line:
            break
    found_after = time.monotonic() - stopped
    killed_at = kill_after_checkpoint(proc, tmp_path, "worker", 1, at_least=stopped_at + 10)
    # read() and not communicate(): communicate polls the pipe itself and would lose what
    # the loop above has already buffered (the restart line often comes in the same read)
    output = "".join(lines) + proc.stdout.read()
    proc.wait(timeout=600)
    assert proc.returncode == 0, output[-4000:]
    frozen, _, killed = output.partition("tfyard: restarting the job (1/2)\n")
    assert re.search(rf"tfyard: worker:1 froze: no heartbeat for \d+s \(--hang_timeout "
                     rf"{HANG_TIMEOUT}\); killed it\n$", frozen), output[-4000:]
    assert "worker:0 froze" not in output  # blocked in the all-reduce, yet beating
    assert HANG_TIMEOUT - 1 <= found_after <= HANG_TIMEOUT + 5, found_after
    assert not any(map(alive, first))   # the first attempt's members stopped, not orphaned
    launcher = "\n".join(line for line in killed.splitlines() if line.startswith("tfyard:"))
    assert "worker:1 failed with signal SIGKILL" in launcher, launcher
    assert "tfyard: restarting the job (2/2)" in launcher, launcher   # the whole job again
    warnings = [line for line in killed.splitlines()   # a compiled model's own is expected
                if "warning" in line and "the model is compiled" not in line]
    assert not warnings, killed[-4000:]
    # the survivor says it in (at most) one line, no traceback (issue 43)
    assert "Traceback" not in killed and "CollectiveReduce" not in killed, killed[-4000:]
    said = [line for line in killed.splitlines() if line.startswith("[worker:0]")
            and ("lost" in line or "rror" in line or "abort" in line)]
    assert len(said) <= 1, said
    assert all(line.startswith("[worker:0] tfyard: error: lost worker:1 (127.0.0.1:")
               for line in said), said
    summary = read_json(tmp_path / "summary.json")
    assert summary["final_step"] == STEPS_TO and summary["model"] == unkilled["model"]
    assert (summary["strategy"], summary["replicas"]) == ("multi_worker_mirrored", 2)
    assert stopped_at < killed_at <= summary["resumed_from_step"] < STEPS_TO
    # a checkpoint (every 10 steps, and each epoch's end): at most one interval lost
    assert summary["resumed_from_step"] in {*range(10, STEPS_TO, 10), *EPOCH_ENDS}
    # exact resume: the weights of the unbroken run, so its evaluation too
    assert summary["weights_digest"] == unkilled["weights_digest"]
    assert summary["eval"] == unkilled["eval"]


def test_killed_parameter_server_worker_is_replaced_without_a_job_restart(tmp_path,
                                                                         digits_work):
    """The PS job with an evaluator side-car trains to the end and learns although a worker
    is SIGKILLed on the way."""
    proc = start_job(tmp_path, digits_work,
                     ["--chief", "--workers", "2", "--ps", "1", "--evaluator"],
                     *ASYNC, "--train_steps", "80", "--checkpoint_every_steps", "20")
    kill_after_checkpoint(proc, tmp_path, "worker", 1)
    output = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, output[-4000:]
    assert "worker:1 failed with signal SIGKILL; restarting it alone" in output
    assert "restarting the job" not in output
    summary = read_json(tmp_path / "summary.json")
    assert summary["strategy"] == "parameter_server"
    assert summary["final_step"] == 80 and summary["resumed_from_step"] == 0
    assert_learned(tmp_path)
    train = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    steps = [r["step"] for r in train]
    assert steps == sorted(set(steps)) and steps[-1] == 80
    # The input-wait probe runs on the workers and comes back through the closures.
    assert all(0.0 <= r["input_wait"] <= 1.0 for r in train)
    evaluated = read_jsonl(tmp_path / "evaluator.jsonl")
    assert evaluated and evaluated[-1]["step"] == 80 and evaluated[-1]["kind"] == "eval"
    assert list((tmp_path / "logs" / "evaluator").glob("events.out.tfevents.*"))


def test_a_member_that_never_comes_up_is_named(tmp_path):
    from tfyard.launch.ports import reserved_ports

    with reserved_ports(2) as (mine, missing):
        tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{mine}",
                                                       f"127.0.0.1:{missing}"]},
                                "task": {"type": "worker", "index": 0}})
        result = run_tfyard("train", "--train_steps", "1", "--output_dir", tmp_path,
                            "--num_gpus", "0", "--startup_timeout", "15", "--quiet",
                            env={"TF_CONFIG": tf_config}, timeout=120)
    assert result.returncode != 0
    line = next(x for x in result.stderr.splitlines() if x.startswith("tfyard: error:"))
    assert line.startswith("tfyard: error: worker:0 gave up after 15s waiting for worker:1 at "
                           f"127.0.0.1:{missing}")
    assert "--startup_timeout" in line


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_member_waiting_for_its_peers_stops_at_a_signal(tmp_path, signum):
    """Issue 67: worker:0 alone, waiting for worker:1, ends within seconds of SIGTERM (143)
    or SIGINT (130) in one line naming whom it waited for, not at --startup_timeout."""
    from tfyard.distribute.server import reachable
    from tfyard.launch.ports import reserved_ports

    with reserved_ports(2) as (mine, missing):
        tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{mine}",
                                                       f"127.0.0.1:{missing}"]},
                                "task": {"type": "worker", "index": 0}})
        proc = subprocess.Popen(
            [sys.executable, "-m", "tfyard", "train", *FAST, "--train_steps", "1",
             "--output_dir", str(tmp_path / "out"), "--work_dir", str(tmp_path / "work"),
             "--startup_timeout", "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "TF_CONFIG": tf_config})
        try:
            wait_for(lambda: reachable(f"127.0.0.1:{mine}"), proc, timeout=120)
            time.sleep(1)
            os.kill(proc.pid, signum)
            signalled = time.monotonic()
            _, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
            proc.wait()
    assert time.monotonic() - signalled < 10
    assert proc.returncode == 128 + signum, err[-4000:]
    assert "Traceback" not in err, err[-4000:]
    said = [line for line in err.splitlines() if line.startswith("tfyard:")]
    assert said == [f"tfyard: worker:0 got {signal.Signals(signum).name} while waiting for "
                    f"worker:1 (127.0.0.1:{missing}) to start; stopped (exit "
                    f"{128 + signum})"], err[-4000:]


def test_a_ps_task_whose_chief_never_comes_up_gives_up(tmp_path):
    from tfyard.launch.ports import reserved_ports

    with reserved_ports(3) as (chief, worker, ps):
        tf_config = json.dumps({"cluster": {"chief": [f"127.0.0.1:{chief}"],
                                            "worker": [f"127.0.0.1:{worker}"],
                                            "ps": [f"127.0.0.1:{ps}"]},
                                "task": {"type": "ps", "index": 0}})
        result = run_tfyard("train", "--output_dir", tmp_path, "--num_gpus", "0",
                            "--startup_timeout", "5", env={"TF_CONFIG": tf_config},
                            timeout=120)
    assert result.returncode == 2
    assert f"chief at 127.0.0.1:{chief} did not come up within 5s" in result.stderr
