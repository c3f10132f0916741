"""`tfyard predict` and `tfyard evaluate` on a `tfyard tune` study use its best trial's run
(tune.json's), on disk and in a bucket; a study with no finished trial is one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import tfyard
from tests.storage.conftest import upload
from tfyard.cli import main


def _study(tmp_path, run, best: int | None):
    """A study as tune leaves it: trial 1 unfinished, trial 3 (a copy of `run`) the best;
    tune.json's recorded run_dir is where the study was before it was copied here."""
    study = tmp_path / "study"
    (study / "trials" / "0001").mkdir(parents=True)
    (study / "trials" / "0001" / "metrics.jsonl").write_text("")
    shutil.copytree(run, study / "trials" / "0003")
    record = {"number": best, "run_dir": f"/elsewhere/study/trials/{best:04d}"} if best else None
    (study / "tune.json").write_text(json.dumps({
        "study_name": "study", "best_trial": record, "metric": "validation/top1",
        "best_value": 0.9 if best else None}))
    return study


def _classes(rows) -> dict:
    return {Path(row["path"]).name: row["class_name"] for row in rows}


def test_a_study_predicts_and_evaluates_with_its_best_run(run, few, local_classes, tmp_path,
                                                          capsys):
    study = _study(tmp_path, run, best=3)
    assert _classes(tfyard.predict(study, [few])) == local_classes
    assert main(["evaluate", "--output_dir", str(study)]) == 0
    said = capsys.readouterr()
    result = json.loads(said.out)
    assert result["source"].startswith(str(study / "trials" / "0003" / "checkpoints"))
    assert f"{study} is a study: its best trial 3 (validation/top1 0.9), run " \
           f"{study / 'trials' / '0003'}" in said.err


def test_a_study_in_a_bucket_predicts_with_its_best_run_alone(run, few, local_classes, s3,
                                                             tmp_path):
    study = _study(tmp_path, run, best=3)
    upload(s3, study, "studies", "study-1")
    assert _classes(tfyard.predict("s3://studies/study-1", [few])) == local_classes
    copied = {path.name for path in (tmp_path / "cache").rglob("000*")}
    assert copied == {"0003"}   # the best run alone was copied, not the whole study


def test_a_study_without_a_finished_trial_is_one_line(run, tmp_path, capsys):
    study = _study(tmp_path, run, best=None)
    for command in ("predict", "evaluate"):
        argv = [command, "--output_dir", str(study)] + (["x.jpg"] if command == "predict" else [])
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "is a study with no finished trial yet" in err
