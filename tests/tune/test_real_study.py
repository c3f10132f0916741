"""One small real study: `tfyard tune` running `tfyard train` trials on the digits, with
population-based training handing a real checkpoint over."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_here
from tests.train.conftest import FAST, read_jsonl
from tests.tune.conftest import write_space

pytest.importorskip("optuna")


@pytest.mark.slow
def test_a_real_pbt_study_hands_a_checkpoint_over_and_names_the_best(tmp_path, capsys):
    """Two real trials stop at step 7; the worse goes on from the better's checkpoint (the
    same bytes), in its own run, with the perturbed learning rate; the study names the best
    trial by its last evaluation. One study: the suite's one real-training tune test (tune
    in this process, each trial a `tfyard train` of its own)."""
    space = write_space(tmp_path, "learning_rate: {loguniform: [0.01, 0.2]}\n")
    shared = [a for a in FAST if a not in ("--learning_rate", "0.05")]
    result = run_here(capsys, "tune", "--space", space, "--metric", "validation/top1", "--mode",
                      "max", "--trials", "2", "--parallel", "2", "--scheduler", "pbt",
                      "--pbt_interval", "7", "--output_dir", tmp_path / "study",
                      "--epochs", "0.3", "--eval_every_epochs", "0.15", "--no_export",
                      *shared)
    assert result.returncode == 0, result.stderr[-3000:]
    trials = tmp_path / "study" / "trials"
    (recipient,) = [p for p in trials.iterdir() if (p / "pbt.json").exists()]
    (entry,) = json.loads((recipient / "pbt.json").read_text())
    donor = trials / f"{entry['donor']:04d}"
    assert entry["step"] == 7 and donor != recipient
    data = "checkpoints/ckpt-7.data-00000-of-00001"
    assert (recipient / data).read_bytes() == (donor / data).read_bytes()
    record = json.loads((recipient / "run.json").read_text())
    assert record["learning_rate"] == entry["params"]["learning_rate"]
    assert record["output_dir"] == str(recipient)
    steps = [r["step"] for r in read_jsonl(recipient / "metrics.jsonl") if r["kind"] == "train"]
    assert steps[-1] == 14 and 7 in steps

    summary = json.loads((tmp_path / "study" / "tune.json").read_text())
    assert summary["trials"]["complete"] == 2
    best = summary["best_trial"]["run_dir"]
    evals = [r for r in read_jsonl(f"{best}/metrics.jsonl") if r["kind"] == "eval"]
    assert len(evals) >= 2 and evals[-1]["top1"] == summary["best_value"]
    assert f"best trial {summary['best_trial']['number']}" in result.stdout
