"""Real multi-process clusters on 127.0.0.1: all-reduce and parameter-server training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tfyard.launch.ports import reserved_ports

PROGRAM = Path(__file__).parent / "programs" / "tiny_train.py"
pytestmark = pytest.mark.cluster


def run_cluster(tmp_path, layout: dict[str, int], steps: int, timeout=300):
    """Start one process per member with its own TF_CONFIG; wait for all; return outputs."""
    members = [(job, i) for job, count in layout.items() for i in range(count)]
    with reserved_ports(len(members)) as ports:
        addresses = iter(f"127.0.0.1:{p}" for p in ports)
        cluster = {job: [next(addresses) for _ in range(count)] for job, count in layout.items()}
        procs = []
        for job, index in members:
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                   "TF_CONFIG": json.dumps({"cluster": cluster,
                                            "task": {"type": job, "index": index}})}
            procs.append(subprocess.Popen(
                [sys.executable, str(PROGRAM), str(tmp_path), str(steps)], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for (job, index), proc, output in zip(members, procs, outputs, strict=True):
        assert proc.returncode == 0, f"{job}:{index} failed:\n{output[-3000:]}"


def load(tmp_path, name):
    return json.loads((tmp_path / f"{name}.json").read_text())


def test_two_worker_multi_worker_mirrored_ends_with_identical_weights(tmp_path):
    run_cluster(tmp_path, {"worker": 2}, steps=30)
    first, second = load(tmp_path, "worker-0"), load(tmp_path, "worker-1")
    assert first["strategy"] == "multi_worker_mirrored"
    for a, b in zip(first["weights"], second["weights"], strict=True):
        np.testing.assert_array_equal(np.array(a), np.array(b))
    assert first["losses"] == second["losses"]
    assert first["losses"][-1] < first["losses"][0]


def test_parameter_server_cluster_trains_through_the_coordinator(tmp_path):
    run_cluster(tmp_path, {"chief": 1, "worker": 2, "ps": 1}, steps=40)
    chief = load(tmp_path, "chief-0")
    assert chief["strategy"] == "parameter_server"
    losses = chief["losses"]
    assert len(losses) == 40
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    assert not any((tmp_path / f"{name}.json").exists() for name in ("worker-0", "ps-0"))
