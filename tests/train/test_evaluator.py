"""The evaluator side-car takes the chief's numbers from run.json (issue 21, found in review):
with --per_replica_batch_size the chief's global batch, and so its last step, depend on its
replicas, which the side-car cannot know."""

from __future__ import annotations

import json

from tests.conftest import run_tfyard
from tests.train.conftest import FAST, read_json, read_jsonl

FLAGS = [f for f in FAST if f not in ("--batch_size", "32")]


def test_the_side_car_stops_at_the_chiefs_last_step(tmp_path, digits_work):
    out = tmp_path / "out"
    common = [*FLAGS, "--per_replica_batch_size", "16", "--epochs", "0.5", "--output_dir", out,
              "--work_dir", digits_work, "--no_export"]
    chief = run_tfyard("train", *common, "--ds", "mirrored", "--cpu_replicas", "2")
    assert chief.returncode == 0, chief.stderr[-2000:]
    last = read_json(out / "summary.json")["final_step"]
    assert last == round(0.5 * (1497 // 32))   # global batch 32 over the 2 replicas
    evaluator = run_tfyard("train", *common, "--startup_timeout", "20", env={
        "TF_CONFIG": json.dumps({"cluster": {"chief": ["127.0.0.1:1"]},
                                 "task": {"type": "evaluator", "index": 0}})})
    assert evaluator.returncode == 0, evaluator.stderr[-2000:]
    assert read_jsonl(out / "evaluator.jsonl")[-1]["step"] == last
