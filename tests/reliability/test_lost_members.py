"""A member SIGKILLed under a hand-written TF_CONFIG (as Kubernetes pods run them): each
survivor says who was lost in one line, with no traceback, and exits 75, the retryable code
the Kubernetes Job ignores. Under `launch local` the same line comes from the survivor
(tests/reliability/test_faults.py, test_preemption.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.reliability.conftest import latest_checkpoint_step
from tests.train.conftest import FAST
from tfyard.errors import LOST_PEER_EXIT_CODE
from tfyard.launch.ports import reserved_ports

pytestmark = pytest.mark.cluster


def start_members(cluster: dict, output_dir, work_dir) -> dict[str, subprocess.Popen]:
    """`tfyard train` once per member of `cluster`, each with its own TF_CONFIG."""
    members = {}
    for job, count in cluster.items():
        for index in range(count):
            members[f"{job}:{index}"] = (job, index)
    with reserved_ports(len(members)) as ports:
        addresses = iter(f"127.0.0.1:{port}" for port in ports)
        spec = {job: [next(addresses) for _ in range(count)] for job, count in cluster.items()}
    command = [sys.executable, "-m", "tfyard", "train", *FAST, "--output_dir", output_dir,
               "--work_dir", work_dir, "--no_export", "--train_steps", "2000",
               "--checkpoint_every_steps", "5", "--learning_rate", "0.02"]
    procs = {}
    for name, (job, index) in members.items():
        tf_config = {"cluster": spec, "task": {"type": job, "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "PYTHONUNBUFFERED": "1"}
        procs[name] = subprocess.Popen(list(map(str, command)), stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, env=env)
    return procs


def assert_no_noise(output: str) -> None:
    """No warning, retracing or traceback line but the coordinator's own retried step."""
    noise = [text for text in output.splitlines()
             if any(word in text.lower() for word in ("warn", "retracing", "traceback"))]
    assert all(text.startswith("tfyard: warning: a step failed on ") for text in noise), \
        output[-4000:]


@pytest.mark.parametrize("cluster, victim, said, saves", [
    ({"worker": 2}, "worker:1", {"worker:0": "lost worker:1 (127.0.0.1:"}, 1),
    ({"chief": 1, "worker": 1}, "chief:0", {"worker:0": "lost chief:0 (127.0.0.1:"}, 1),
    ({"chief": 1, "ps": 1, "worker": 1}, "ps:0",
     {"chief:0": "lost ps:0 (127.0.0.1:", "worker:0": "lost chief:0 (127.0.0.1:"}, 5),
])
def test_a_killed_member_is_one_line_on_each_survivor(tmp_path, digits_work, cluster, victim,
                                                      said, saves):
    """Killed once `saves` checkpoints (one every 5 steps) are written. The parameter-server
    job's five: each PS save traces TensorFlow's save function again (by design: see
    tfyard.quiet.python_noise.PYTHON_NOISE); its retracing warning is not the user's to act
    on, so no member prints a warning but the chief's coordinator retrying a step after the kill."""
    procs = start_members(cluster, tmp_path / "out", digits_work)
    try:
        deadline = time.monotonic() + 400   # PS start-up is slow on 2 busy cores
        while latest_checkpoint_step(tmp_path / "out") < 5 * saves:
            assert all(p.poll() is None for p in procs.values()), \
                {n: p.communicate()[0][-2000:] for n, p in procs.items()}
            assert time.monotonic() < deadline, "no checkpoint"
            time.sleep(0.5)
        procs[victim].send_signal(signal.SIGKILL)
        for name, line in said.items():
            output = procs[name].communicate(timeout=120)[0]
            assert procs[name].returncode == LOST_PEER_EXIT_CODE, output[-3000:]
            assert "Traceback" not in output and "Error received" not in output, output
            about = [text for text in output.splitlines() if "lost" in text
                     or "Unavailable" in text or "aborted" in text or "failed" in text]
            assert len(about) <= 3, output     # at most: a step failed on a worker, retried
            (lost,) = [text for text in about if text.startswith("tfyard: error: lost ")]
            assert line in lost and "latest checkpoint" in lost, output
            assert_no_noise(output)
        assert_no_noise(procs[victim].communicate(timeout=60)[0])   # its output until killed
    finally:
        for proc in procs.values():
            proc.kill()
            proc.communicate()
