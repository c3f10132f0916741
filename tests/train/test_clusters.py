"""`tfyard train` as members of real clusters started by `tfyard launch local`. The
parameter-server job (with an evaluator, and a worker killed on the way) is
`tests/reliability/test_faults.py::test_killed_parameter_server_worker_is_replaced_without_a_job_restart`."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import run_tfyard
from tests.train.conftest import FAST, assert_learned, read_json

pytestmark = pytest.mark.cluster
# Asynchronous updates from two workers add their own momentum to SGD's (Mitliagkas et al.
# 2016): the synchronous learning rate of FAST diverges, a smaller one learns.
ASYNC = ["--learning_rate", "0.02"]


def launch(tmp_path, work, layout: list[str], *train_flags):
    command = [sys.executable, "-m", "tfyard", "train", *FAST, "--output_dir", tmp_path,
               "--work_dir", work, "--no_export", *train_flags]
    result = run_tfyard("launch", "local", *layout, "--", *command, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result


def test_two_worker_all_reduce_ends_with_identical_weights(tmp_path, digits_work):
    launch(tmp_path, digits_work, ["--workers", "2"], "--train_steps", "40",
           "--eval_every_epochs", "100")
    members = digits_work / "members"
    first, second = read_json(members / "worker-0.json"), read_json(members / "worker-1.json")
    assert first["strategy"] == "multi_worker_mirrored" and first["replicas"] == 2
    assert first["final_step"] == second["final_step"] == 40
    assert first["weights_digest"] == second["weights_digest"]
    assert_learned(tmp_path)
