"""`tfyard train` as members of real clusters started by `tfyard launch local`."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import run_tfyard
from tests.train.conftest import FAST, assert_learned, read_json, read_jsonl

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


def test_parameter_server_cluster_with_evaluator(tmp_path, digits_work):
    launch(tmp_path, digits_work, ["--chief", "--workers", "2", "--ps", "1", "--evaluator"],
           *ASYNC, "--train_steps", "80", "--checkpoint_every_steps", "20")
    summary = read_json(tmp_path / "summary.json")
    assert summary["strategy"] == "parameter_server" and summary["final_step"] == 80
    assert_learned(tmp_path)
    # The input-wait probe runs on the workers and comes back through the closures.
    train = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert all(0.0 <= r["input_wait"] <= 1.0 for r in train)
    evaluated = read_jsonl(tmp_path / "evaluator.jsonl")
    assert evaluated and evaluated[-1]["step"] == 80 and evaluated[-1]["kind"] == "eval"
    assert list((tmp_path / "logs" / "evaluator").glob("events.out.tfevents.*"))
