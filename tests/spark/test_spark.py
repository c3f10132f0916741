"""Real Spark: barrier stages in local mode (a PS job through the Python API, each of the
user's own models through tfyard.fit, a stage retried on the module's session, a failing
member through the CLI) and the classic example spark-submitted to a standalone master +
worker on 127.0.0.1 as a two-member MultiWorkerMirrored job."""

from __future__ import annotations

import json
import os
import re
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import LEAN_JVM
from tests.launch import helpers
from tests.launch.helpers import alive, program, recorded_pids

pyspark = pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
TRAIN = str(Path(__file__).parents[1] / "launch" / "programs" / "train.py")
EXAMPLE = Path(__file__).parents[2] / "examples" / "resnet_cifar_spark.py"


@pytest.fixture(scope="module")
def sc():
    from pyspark import cloudpickle

    from tfyard.launch.spark import spark_context

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # main_funs live here
    cloudpickle.register_pickle_by_value(helpers)                # and there
    # 3 task slots, each task tried twice (spark.task.maxFailures 2): the retried stage below
    with spark_context("local[3,2]", ["spark.ui.enabled=false"]) as context:
        context.setLogLevel("ERROR")
        yield context


def train_on_spark(argv, ctx):
    """A TFoS-style main_fun: record the context, then run the training program."""
    out = argv[argv.index("--output_dir") + 1]
    with open(os.path.join(out, f"ctx-{ctx.executor_id}.json"), "w") as handle:
        json.dump({"job_name": ctx.job_name, "task_index": ctx.task_index,
                   "cluster_spec": ctx.cluster_spec, "num_workers": ctx.num_workers,
                   "data": ctx.absolute_path("data"), "url": ctx.absolute_path("gs://b/x")},
                  handle)
    sys.argv = [TRAIN, *argv]
    runpy.run_path(TRAIN, run_name="__main__")


def test_parameter_server_job_through_the_python_api(sc, tmp_path, capsys):
    import tfyard.spark

    tfyard.spark.run(sc, train_on_spark, ["--output_dir", str(tmp_path), "--train_steps", "10"],
                     num_executors=3, num_ps=1)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["final_step"] >= 10 and summary["resumed_from_step"] == 0
    contexts = [json.loads((tmp_path / f"ctx-{i}.json").read_text()) for i in range(3)]
    assert [(c["job_name"], c["task_index"]) for c in contexts] == [
        ("ps", 0), ("chief", 0), ("worker", 0)]
    assert all(c["cluster_spec"] == contexts[0]["cluster_spec"] for c in contexts)
    assert sorted(contexts[0]["cluster_spec"]) == ["chief", "ps", "worker"]
    assert contexts[0]["num_workers"] == 1
    assert contexts[0]["data"] == os.path.join(os.getcwd(), "data")
    assert contexts[0]["url"] == "gs://b/x"
    text = capsys.readouterr().out
    assert "[chief:0] chief:0: train with parameter_server" in text
    assert "[ps:0] ps:0: serve with parameter_server" in text


def test_a_users_model_trains_all_reduce_through_tfyard_fit(sc, tmp_path, digits_work):
    """MobileNet's batch norm averaged across two Spark members; the compiled model takes
    this path on Ray (tests/launch/test_ray.py), the compiled model and the convnet on a
    local all-reduce cluster killed and resumed (tests/reliability/test_faults.py)."""
    import tfyard.spark
    from tests.train.task.test_user_models import MODELS, USER_MODELS

    name = "mobilenet"
    model = f"{MODELS}:{name}"
    tfyard.spark.run(sc, helpers.fit_user_model, [model, USER_MODELS[name], str(tmp_path),
                                        str(digits_work)], num_executors=2)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["strategy"], summary["replicas"], summary["final_step"]) == (
        "multi_worker_mirrored", 2, 6)
    assert summary["model"] == model
    assert "top1" in summary["eval"]
    members = sorted(p.name for p in (digits_work / "members").glob("*.json"))
    assert {"chief-0.json", "worker-0.json"} <= set(members)


def test_servers_that_never_exit_are_stopped_once_the_chief_is_done(sc, tmp_path):
    from tfyard.launch.spark import run_command

    started, lines = time.monotonic(), []
    run_command(sc, program("member.py", "--pid_dir", tmp_path, "--listen", "--exit", "chief:0:0"),
                num_executors=3, num_ps=1, write=lines.append)
    assert time.monotonic() - started < 100  # the servers would sleep 120 s
    assert sorted(lines) == ["[chief:0] hello from chief:0\n", "[ps:0] hello from ps:0\n",
                             "[worker:0] hello from worker:0\n"]
    pids = recorded_pids(tmp_path)
    assert len(pids) == 3 and not any(alive(p) for ps in pids.values() for p in ps)


def test_a_retried_barrier_stage_starts_every_member_again(sc, tmp_path):
    """A member exiting 143 (preempted, saved) fails its task; with spark.task.maxFailures 2
    (the module's local[3,2]) Spark relaunches the whole barrier stage and every member
    starts again, which for `tfyard train` means resuming from the latest checkpoint. On the
    module's session: a fresh driver is not the point (the CLI's is the failing member's)."""
    from tfyard.launch.spark import run_command

    lines = []
    run_command(sc, program("preemptible.py", "--pid_dir", tmp_path, "--preempt_once",
                            "worker:0", "--run_s", 3), num_executors=2, write=lines.append)
    text = "".join(lines)
    assert "[worker:0] worker:0: preempted" in text, text
    pids = recorded_pids(tmp_path)
    assert [len(pids[m]) for m in ("chief:0", "worker:0")] == [2, 2]  # two stage attempts
    assert "[chief:0] chief:0: done" in text


def test_a_failing_member_fails_the_stage_with_its_error(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tfyard", "launch", "spark", "--master", "local[3]",
         "--num_executors", "3", "--conf", "spark.ui.enabled=false", "--",
         *program("member.py", "--pid_dir", tmp_path, "--exit", "worker:0:3")],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.endswith("tfyard: launch failed: worker:0 failed with exit code 3\n"
                                  "[worker:0] hello from worker:0\n"
                                  "[worker:0] worker:0 fails on purpose\n"), result.stderr
    assert "[chief:0] hello from chief:0" in result.stdout
    # members' lines alone: no stage bar glued onto them, no log4j, WARN or JVM start-up
    # lines, no executor's copy of the failure (issue 43)
    assert all(line.startswith(("[chief:0] ", "[worker:")) for line in
               result.stdout.splitlines()), result.stdout
    assert not re.search(r"log4j|WARN|Exception in task|incubator|\[Stage", result.stderr), \
        result.stderr
    pids = recorded_pids(tmp_path)
    assert sorted(pids) == ["chief:0", "worker:0", "worker:1"]
    deadline = time.monotonic() + 30
    while any(alive(p) for ps in pids.values() for p in ps):
        assert time.monotonic() < deadline, pids
        time.sleep(0.2)


def _spark_class(name, *args, log, env):
    return subprocess.Popen([str(Path(env["SPARK_HOME"]) / "bin" / "spark-class"), name, *args],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def _wait_for(path: Path, pattern: str, timeout: float = 120) -> re.Match:
    deadline = time.monotonic() + timeout
    while not (match := re.search(pattern, path.read_text())):
        assert time.monotonic() < deadline, path.read_text()[-2000:]
        time.sleep(0.2)
    return match


def _cifar(root: Path) -> None:
    from tests.data.helpers import write_cifar

    labels = list(range(10)) * 4
    write_cifar(root, "cifar10", {**{f"data_batch_{i}.bin": labels for i in range(1, 6)},
                                  "test_batch.bin": labels})


def test_resnet_cifar_spark_example_on_a_standalone_cluster(tmp_path):
    """spark-submit the classic example to a real master + worker: a 2-member MWMS job
    (without XLA, which is not the point here and doubles each member's CPU)."""
    _cifar(tmp_path / "cifar-10-batches-bin")
    home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable,
           "TF_CPP_MIN_LOG_LEVEL": "2", "SPARK_SUBMIT_OPTS": LEAN_JVM}
    daemon_env = {**os.environ, "SPARK_HOME": str(home), "SPARK_DAEMON_JAVA_OPTS": LEAN_JVM}
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    with master_log.open("w") as m_log, worker_log.open("w") as w_log:
        master = _spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                              "--port", "0", "--webui-port", "0", log=m_log, env=daemon_env)
        daemons = [master]
        try:
            url = _wait_for(master_log, r"Starting Spark master at (spark://[\d.:]+)").group(1)
            daemons.append(_spark_class(
                "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                "--cores", "2", "--memory", "2g", "--webui-port", "0",
                "--work-dir", str(tmp_path / "work"), log=w_log, env=daemon_env))
            _wait_for(master_log, r"Registering worker")
            result = subprocess.run(
                [str(home / "bin" / "spark-submit"), "--master", url, "--conf",
                 "spark.ui.enabled=false", "--conf", f"spark.executor.extraJavaOptions={LEAN_JVM}",
                 str(EXAMPLE), "--cluster_size", "2", "--epochs", "1",
                 "--data_dir", "cifar-10-batches-bin", "--num_gpus=0",
                 "--ds=multi_worker_mirrored", "--train_epochs", "1", "--batch_size=50",
                 "--resnet_size=8", "--quiet", "--no_jit_compile", "--no_export",
                 "--output_dir", "out"],
                capture_output=True, text=True, timeout=400, cwd=tmp_path, env=env)
        finally:
            for daemon in daemons:
                os.killpg(daemon.pid, signal.SIGTERM)
                daemon.wait(30)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["model"], summary["strategy"]) == ("cifar_resnet8", "multi_worker_mirrored")
    assert summary["final_step"] == 4  # 200 images, global batch 50, one epoch
    assert "[chief:0] executor 0: chief:0 of 2 worker(s)" in result.stdout
    assert "[worker:0] executor 1: worker:0 of 2 worker(s)" in result.stdout
    assert "app-" in " ".join(os.listdir(tmp_path / "work"))  # the standalone worker ran it
