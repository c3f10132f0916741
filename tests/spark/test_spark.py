"""Real Spark: barrier stages in local mode (PS job, a failing member) and a standalone
master + worker on 127.0.0.1 running a two-member MultiWorkerMirrored job."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.launch.helpers import alive, program, recorded_pids

pyspark = pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
TRAIN = str(Path(__file__).parents[1] / "launch" / "programs" / "train.py")


@pytest.fixture(scope="module")
def sc():
    from pyspark import cloudpickle

    from tfyard.launch.spark import spark_context

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # main_fun lives here
    with spark_context("local[3]", ["spark.ui.enabled=false"]) as context:
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


def test_parameter_server_job_through_the_python_api(sc, tmp_path):
    import tfyard.spark

    lines = []
    tfyard.launch.spark.run_function(sc, train_on_spark, ["--output_dir", str(tmp_path),
                                     "--train_steps", "10"], num_executors=3, num_ps=1,
                                     write=lines.append)
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
    text = "".join(lines)
    assert "[chief:0] chief:0: train with parameter_server" in text
    assert "[ps:0] ps:0: serve with parameter_server" in text


def test_a_failing_member_fails_the_stage_with_its_error(sc, tmp_path):
    import tfyard.spark
    from tfyard.launch.spark import run_command

    with pytest.raises(tfyard.spark.MemberFailed) as failure:
        run_command(sc, program("member.py", "--pid_dir", tmp_path, "--fail", "worker:0:3"),
                    num_executors=3, write=lambda line: None)
    message = str(failure.value)
    assert message.splitlines()[0] == "worker:0 failed with exit code 3"
    assert "[worker:0] worker:0 fails on purpose" in message
    pids = recorded_pids(tmp_path)
    assert sorted(pids) == ["chief:0", "worker:0", "worker:1"]
    deadline = time.monotonic() + 30
    while any(alive(p) for ps in pids.values() for p in ps):
        assert time.monotonic() < deadline, pids
        time.sleep(0.2)


def _spark_class(name, *args, log):
    home = Path(pyspark.__file__).parent
    return subprocess.Popen([str(home / "bin" / "spark-class"), name, *args], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "SPARK_HOME": str(home)})


def _wait_for(path: Path, pattern: str, timeout: float = 120) -> re.Match:
    deadline = time.monotonic() + timeout
    while not (match := re.search(pattern, path.read_text())):
        assert time.monotonic() < deadline, path.read_text()[-2000:]
        time.sleep(0.2)
    return match


def test_multi_worker_mirrored_on_a_standalone_cluster(tmp_path):
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    with master_log.open("w") as m_log, worker_log.open("w") as w_log:
        master = _spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                              "--port", "0", "--webui-port", "0", log=m_log)
        daemons = [master]
        try:
            url = _wait_for(master_log, r"Starting Spark master at (spark://[\d.:]+)").group(1)
            daemons.append(_spark_class(
                "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                "--cores", "2", "--memory", "2g", "--webui-port", "0",
                "--work-dir", str(tmp_path / "work"), log=w_log))
            _wait_for(master_log, r"Registering worker")
            out = tmp_path / "out"
            result = subprocess.run(
                [sys.executable, "-m", "tfyard", "launch", "spark", "--master", url,
                 "--num_executors", "2", "--conf", "spark.ui.enabled=false", "--",
                 *program("train.py", "--output_dir", out, "--train_steps", 10)],
                capture_output=True, text=True, timeout=400,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        finally:
            for daemon in daemons:
                os.killpg(daemon.pid, 15)
                daemon.wait(30)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary == {"final_step": 10, "resumed_from_step": 0, "num_replicas": 2}
    for member in ("chief:0", "worker:0"):
        assert f"[{member}] {member}: done at step 10" in result.stdout
