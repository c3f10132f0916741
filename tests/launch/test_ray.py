"""Real Ray: one local Ray on 127.0.0.1 (2 CPUs, no dashboard, no usage stats) shared by
the Ray tests run one after another (tests/conftest.py `ray_address`); `tfyard launch ray`
and `tfyard.ray.run` train the digits for real as all-reduce and parameter-server clusters
(the user's own models through tfyard.fit), name a failing member, and restart after a
SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

ray = pytest.importorskip("ray")

from tests.launch import helpers  # noqa: E402
from tests.launch.helpers import alive, follow, launch, program, recorded_pids, started_pid  # noqa: E402
from tests.train.conftest import FAST, read_json  # noqa: E402
from tests.train.task.test_user_models import MODELS  # noqa: E402

pytestmark = pytest.mark.ray


def train_command(out, work, *flags) -> list[str]:
    return [sys.executable, "-m", "tfyard", "train", *FAST, "--output_dir", str(out),
            "--work_dir", str(work), "--no_export", *map(str, flags)]


def launch_ray(address, *args):
    return launch("ray", "--address", address, "--grace", 2, *args)


def train_on_ray(argv, ctx):
    """A TFoS-style main_fun: record the context, then train in this process."""
    from tfyard.cli import main

    out = argv[argv.index("--output_dir") + 1]
    with open(os.path.join(out, f"ctx-{ctx.executor_id}.json"), "w") as handle:
        json.dump({"job_name": ctx.job_name, "task_index": ctx.task_index,
                   "cluster_spec": ctx.cluster_spec, "data": ctx.absolute_path("data")}, handle)
    sys.exit(main(["train", *argv]))


def test_parameter_server_job_with_one_ps_through_the_python_api(ray_address, tmp_path,
                                                                 digits_work):
    import tfyard.ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # main_fun lives here
    args = train_command(tmp_path, digits_work, "--train_steps", 20, "--learning_rate", 0.02,
                         "--checkpoint_every_steps", 10)[4:]
    outcome = tfyard.ray.run(train_on_ray, args, num_workers=1, num_ps=1, cpus_per_member=0.5)
    assert outcome.returncode == 0 and outcome.restarts == 0
    summary = read_json(tmp_path / "summary.json")
    assert summary["strategy"] == "parameter_server" and summary["final_step"] >= 20
    contexts = [read_json(tmp_path / f"ctx-{i}.json") for i in range(3)]
    assert [(c["job_name"], c["task_index"]) for c in contexts] == [
        ("ps", 0), ("chief", 0), ("worker", 0)]
    assert all(c["cluster_spec"] == contexts[0]["cluster_spec"] for c in contexts)
    hosts = [a.rsplit(":", 1)[0] for hosts in contexts[0]["cluster_spec"].values() for a in hosts]
    assert hosts == ["127.0.0.1"] * 3
    assert contexts[0]["data"] == os.path.join(os.getcwd(), "data")


def test_a_users_model_trains_all_reduce_through_tfyard_fit(ray_address, tmp_path, digits_work):
    """The compiled model (its own loss, metrics and Adam) across two Ray actors; convnet
    goes through the CLI below, MobileNet through Spark (tests/spark/test_spark.py)."""
    import tfyard.ray
    from tests.train.task.test_user_models import USER_MODELS

    name = "compiled"

    ray.cloudpickle.register_pickle_by_value(helpers)  # main_fun lives there
    model = f"{MODELS}:{name}"
    outcome = tfyard.ray.run(helpers.fit_user_model, [model, USER_MODELS[name], str(tmp_path),
                                          str(digits_work)], num_workers=2)
    assert outcome.returncode == 0 and outcome.restarts == 0
    summary = read_json(tmp_path / "summary.json")
    assert (summary["strategy"], summary["replicas"], summary["final_step"]) == (
        "multi_worker_mirrored", 2, 6)
    assert summary["model"] == model
    assert "accuracy" in summary["eval"]


def test_a_failing_member_stops_the_others_and_is_named(ray_address, tmp_path):
    proc = launch_ray(ray_address, "--workers", 2, "--chief", "--cpus_per_member", 0.5, "--",
                      *program("member.py", "--pid_dir", tmp_path, "--exit", "worker:1:3"))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 3, out
    assert "tfyard: worker:1 failed with exit code 3" in out
    assert "tfyard: launch failed: worker:1 failed with exit code 3; stopped the other " \
        "members (restarts used: 0)\n" in out
    # its last lines were the last ones printed: not repeated in the final report
    assert out.count("[worker:1] worker:1 fails on purpose\n") == 1, out
    assert "[chief:0] hello from chief:0" in out
    pids = recorded_pids(tmp_path)
    assert sorted(pids) == ["chief:0", "worker:0", "worker:1"]
    deadline = time.monotonic() + 30
    while any(alive(p) for ps in pids.values() for p in ps):  # members and grandchildren
        assert time.monotonic() < deadline, pids
        time.sleep(0.2)


def test_two_all_reduce_workers_train_to_the_end_through_a_killed_member(ray_address,
                                                                         tmp_path, digits_work):
    """Trains the digits with MultiWorkerMirrored on 2 actors' nodes and restarts the job
    from its checkpoint after worker:1 is SIGKILLed (one test: each Ray job start costs
    a minute on 2 cores)."""
    proc = launch_ray(ray_address, "--workers", 2, "--max_restarts", 1, "--",
                      *train_command(tmp_path, digits_work, "--train_steps", 60,
                                     "--checkpoint_every_steps", 10, "--eval_every_epochs", 100,
                                     "--model", f"{MODELS}:convnet"))   # the user's own
    lines = follow(proc)
    deadline = time.monotonic() + 400
    while not (tmp_path / "checkpoints" / "checkpoint").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
        time.sleep(0.2)
    victim = started_pid(lines, "worker:1")
    os.kill(victim, signal.SIGKILL)
    assert proc.wait(timeout=600) == 0, "".join(lines)[-4000:]
    text = "".join(lines)
    assert "tfyard: worker:1 failed with signal SIGKILL" in text
    assert "tfyard: restarting the job (1/1)" in text
    assert started_pid(lines, "worker:1") != victim
    summary = read_json(tmp_path / "summary.json")
    assert (summary["strategy"], summary["replicas"], summary["final_step"]) == (
        "multi_worker_mirrored", 2, 60)
    # killed once the first checkpoint is there; 50 more steps leave room for a loaded machine
    assert 10 <= summary["resumed_from_step"] < 60
    started = [line for line in text.splitlines() if line.startswith("tfyard: started")]
    assert len(started) == 4 and all(" at 127.0.0.1:" in line for line in started), started


def test_preemption_is_free_and_a_stopped_member_is_found_through_its_actor(ray_address,
                                                                           tmp_path):
    proc = launch_ray(ray_address, "--workers", 2, "--max_restarts", 1, "--hang_timeout", 3,
                      "--", *program("preemptible.py", "--pid_dir", tmp_path,
                                     "--preempt_once", "worker:0", "--run_s", 8))
    lines = follow(proc)
    deadline = time.monotonic() + 120
    while len(recorded_pids(tmp_path).get("worker:1", [])) < 2:  # the second attempt is up
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.1)
    time.sleep(1.5)
    victim = started_pid(lines, "worker:1")
    os.kill(victim, signal.SIGSTOP)
    assert proc.wait(timeout=120) == 0, "".join(lines)
    text = "".join(lines)
    assert "tfyard: worker:0 was preempted (exit code 143: saved and stopped)\n" \
        "tfyard: restarting the job after a preemption (not counted against " \
        "--max_restarts)\n" in text
    assert "tfyard: worker:1 froze: no heartbeat for" in text
    assert "tfyard: restarting the job (1/1)\n" in text
    assert not alive(victim)


def test_a_head_that_wants_a_token_is_named_as_such():
    """A `ray start --head` with token authentication refuses a process without its token:
    the launcher says which settings to give, not "cannot connect". The head keeps its
    files (and the address file that `ray.init()` looks for) in a folder of its own, so no
    other test's Ray finds it."""
    import shutil
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
    own = tempfile.mkdtemp(prefix="ray")   # short: Ray's socket paths are under it
    head = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head", "--block",
         "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "1",
         "--include-dashboard=false", "--disable-usage-stats"],
        env={**env, "RAY_TMPDIR": own, "RAY_AUTH_MODE": "token",
             "RAY_AUTH_TOKEN": uuid.uuid4().hex},
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port)
        proc = subprocess.run(
            [sys.executable, "-m", "tfyard", "launch", "ray", "--workers", "1", "--address",
             f"127.0.0.1:{port}", "--", sys.executable, "-c", "pass"],
            env={**env, "RAY_gcs_rpc_server_reconnect_timeout_s": "5"},
            capture_output=True, text=True, timeout=180)
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(60)
        shutil.rmtree(own, ignore_errors=True)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "uses token authentication" in lines[0] and \
        "RAY_AUTH_TOKEN" in lines[0], proc.stderr


def _wait_for_port(port: int, timeout: float = 60.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"no Ray head on port {port} after {timeout:.0f} s")
