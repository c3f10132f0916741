"""Faults survived: members killed mid-training, cut-short saves, full disks, missing peers.

The real TensorFlow clusters of `tfyard launch local` are these: an all-reduce job restarted
whole under --max_restarts, and a chief, workers, a ps and an evaluator, one worker restarted
alone (tests/launch/test_local.py keeps the launcher's own promises on cheap members)."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.conftest import run_tfyard
from tests.launch.helpers import alive
from tests.reliability.conftest import latest_checkpoint_step, member_pid, start_job, wait_for
from tests.train.conftest import assert_learned, read_json, read_jsonl
from tests.train.task.test_user_models import user_model
from tests.train.test_clusters import ASYNC

pytestmark = pytest.mark.cluster
# With --seed a resumed all-reduce job must end with the weights of an unbroken one, bit for
# bit (issue 14), so a short run is enough: kills land after step 10, and the 70 steps after
# it (across the epoch boundary at 46) leave room for a loaded machine to kill before the end.
STEPS = ["--train_steps", "80", "--checkpoint_every_steps", "10"]


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


def test_killed_all_reduce_member_resumes_and_finishes(tmp_path, digits_work, unkilled):
    victim, name = ("worker", 1), unkilled["model"].rpartition(":")[2]
    proc = start_job(tmp_path, digits_work, ["--workers", "2"], *STEPS, *user_model(name))
    wait_for(lambda: member_pid(proc.pid, "worker", 0) is not None, proc)
    survivor = member_pid(proc.pid, "worker", 0)   # of the first attempt: no restart yet
    killed_at = kill_after_checkpoint(proc, tmp_path, *victim, at_least=10)
    output = proc.communicate(timeout=600)[0]
    launcher = "\n".join(line for line in output.splitlines() if line.startswith("tfyard:"))
    assert proc.returncode == 0, output[-4000:]
    assert f"{victim[0]}:{victim[1]} failed with signal SIGKILL" in launcher, launcher
    assert "tfyard: restarting the job (1/1)" in launcher, launcher   # the whole job, once
    assert not alive(survivor)   # the killed attempt's survivor was stopped, not orphaned
    warnings = [line for line in output.splitlines()   # a compiled model's own is expected
                if "warning" in line and "the model is compiled" not in line]
    assert not warnings, output[-4000:]
    # the survivor says it in (at most) one line, no traceback (issue 43)
    assert "Traceback" not in output and "CollectiveReduce" not in output, output[-4000:]
    survivor = [line for line in output.splitlines() if line.startswith("[worker:0]")
                and ("lost" in line or "rror" in line or "abort" in line)]
    assert len(survivor) <= 1, survivor
    assert all(line.startswith("[worker:0] tfyard: error: lost worker:1 (127.0.0.1:")
               for line in survivor), survivor
    summary = read_json(tmp_path / "summary.json")
    assert summary["final_step"] == 80 and summary["model"] == unkilled["model"]
    assert (summary["strategy"], summary["replicas"]) == ("multi_worker_mirrored", 2)
    assert killed_at <= summary["resumed_from_step"] < 80
    # a checkpoint (every 10 steps, and the epoch's end at 46): at most one interval lost
    assert summary["resumed_from_step"] in {*range(10, 80, 10), 46}
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
