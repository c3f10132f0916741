"""A tracked study on a real `mlflow server`, with stand-in trials: one parent run, a child
run a trial (named in its run.json, where train continues it), the best child tagged, and a
rerun continuing the same parent."""

from __future__ import annotations

import json

import pytest

from tests.tune.conftest import tune, write_space

optuna = pytest.importorskip("optuna")


def test_a_study_is_a_parent_run_and_its_trials_children(
        tmp_path, monkeypatch, mlflow_uri, experiment):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", experiment)
    space = write_space(tmp_path, {"learning_rate": {"loguniform": [0.001, 1.0]}, "epochs": 1})
    argv = ["--space", space, "--metric", "validation/top1", "--mode", "max", "--output_dir",
            tmp_path / "study", "--seed", 1, "--trials"]
    tune(*argv, 2)
    summary = tune(*argv, 3)   # the rerun continues the study and its parent run

    client = MlflowClient(tracking_uri=mlflow_uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = {int(r.data.tags["tfyard.trial"]): r for r in runs if r is not parent}
    assert sorted(children) == [0, 1, 2] and parent.info.status == "FINISHED"
    study = optuna.load_study(study_name="study", storage=summary["storage"])
    assert study.user_attrs["mlflow_parent_run_id"] == parent.info.run_id
    for trial in study.trials:
        child = children[trial.number]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED"
        assert child.data.params["learning_rate"] == str(trial.params["learning_rate"])
        record = json.loads((tmp_path / "study" / "trials" / f"{trial.number:04d}" /
                             "run.json").read_text())
        assert record["mlflow_run_id"] == child.info.run_id   # train continues this run
    best = summary["best_trial"]["number"]
    assert [n for n, r in children.items() if r.data.tags.get("tfyard.best")] == [best]
    assert parent.data.tags["tfyard.best_trial"] == str(best)
    assert parent.data.metrics["best_validation/top1"] == summary["best_value"]
    files = {f.path for f in client.list_artifacts(parent.info.run_id)}
    assert {"tune.json", "trials.csv", "tune.png"} <= files
