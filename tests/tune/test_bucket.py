"""A study whose --output_dir is a bucket prefix (on the suite's S3 server): each trial an
ordinary bucket run in DIR/trials/NNNN, the study in the --storage database, its summary,
table, plot and logs in the bucket, and predict/evaluate given the prefix using the best
trial's run there. Stand-in trials, and one small real study."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.conftest import run_here
from tests.storage.conftest import s3, s3_endpoint  # noqa: F401 - the fixtures used here
from tests.train.conftest import FAST
from tests.tune.conftest import tune, write_space
from tfyard.errors import UserError
from tfyard.runfiles.study import run_named

optuna = pytest.importorskip("optuna")
BUCKET = "tune-studies"
SPACE = {"learning_rate": {"loguniform": [0.001, 1.0]}, "epochs": 1}


def _argv(tmp_path, *extra):
    return ["--space", write_space(tmp_path, SPACE), "--metric", "validation/top1", "--mode",
            "max", "--trials", 3, "--output_dir", f"s3://{BUCKET}/studies/one", "--seed", 1,
            *extra]


def _objects(client) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix="studies/one/")
    return {o["Key"].removeprefix("studies/one/"):
            client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            for o in listed.get("Contents", [])}


def test_a_study_in_a_bucket_keeps_its_runs_and_summary_there(s3, tmp_path):  # noqa: F811
    s3.create_bucket(Bucket=BUCKET)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    summary = tune(*_argv(tmp_path, "--storage", storage))
    study = optuna.load_study(study_name="one", storage=storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    best = study.best_trial
    url = f"s3://{BUCKET}/studies/one"
    assert summary["best_trial"] == {"number": best.number,
                                     "run_dir": f"{url}/trials/{best.number:04d}"}
    assert summary["best_value"] == best.value and summary["storage"] == storage

    objects = _objects(s3)
    assert json.loads(objects["tune.json"]) == summary
    rows = list(csv.DictReader(io.StringIO(objects["trials.csv"].decode())))
    assert [row["run_dir"] for row in rows] == [f"{url}/trials/{n:04d}" for n in range(3)]
    assert objects["tune.png"].startswith(b"\x89PNG")
    for number, trial in enumerate(study.trials):   # each run and log in the bucket, whole
        reports = [json.loads(line) for line in
                   objects[f"trials/{number:04d}/metrics.jsonl"].decode().splitlines()]
        assert reports[-1]["top1"] == trial.value and len(reports) == 10
        assert b"stand-in: done at step 100" in objects[f"logs/{number:04d}.log"]
        assert sorted(trial.intermediate_values) == list(range(1, 11))   # evaluation numbers

    # predict and evaluate given the study use its best trial's run, in the bucket
    assert run_named(url) == run_named(url + "/") == f"{url}/trials/{best.number:04d}"

    again = tune(*_argv(tmp_path, "--storage", storage))   # the same command: nothing to do
    assert again == summary and len(optuna.load_study(study_name="one",
                                                      storage=storage).trials) == 3


@pytest.mark.parametrize("extra, words", [
    ([], "--output_dir in a bucket needs --storage URL"),
    (["--storage", "STORAGE", "--scheduler", "pbt", "--pbt_interval", "10", "--parallel", "2"],
     "--scheduler pbt (it hands checkpoints"),
    (["--storage", "STORAGE", "--on", "ray", "--mlflow_uri", "http://127.0.0.1:9"],
     "MLflow tracking --on ray (tune names"),
])
def test_what_a_bucket_study_cannot_do_is_one_line_before_any_trial(tmp_path, extra, words):
    storage = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(UserError, match="^--output_dir in a bucket") as refused:
        tune(*_argv(tmp_path, *[storage if flag == "STORAGE" else flag for flag in extra]))
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "x.db").exists()


def test_a_missing_bucket_is_one_line_before_any_trial(s3, tmp_path):  # noqa: F811
    storage = f"sqlite:///{tmp_path / 'x.db'}"
    argv = [flag.replace(BUCKET, "no-such-bucket") if isinstance(flag, str) else flag
            for flag in _argv(tmp_path, "--storage", storage)]
    with pytest.raises(UserError, match="^--output_dir s3://no-such-bucket/studies/one") as no:
        tune(*argv)
    assert "no such bucket" in str(no.value) and "\n" not in str(no.value)
    assert not (tmp_path / "x.db").exists()
    assert not list(tmp_path.rglob("*.log"))
    # the store is asked last: a bad space is its own line, whatever the bucket
    argv[1] = write_space(tmp_path, {"learning_rate": {"loguniform": [0.0, 1.0]}})
    with pytest.raises(UserError, match="^--space .*learning_rate: a log range") as bad:
        tune(*argv)
    assert "no such bucket" not in str(bad.value)


@pytest.mark.slow
def test_a_real_tracked_study_in_a_bucket_evaluates_with_its_best_run(
        s3, tmp_path, capsys, monkeypatch, mlflow_uri, experiment):  # noqa: F811
    """A real `tfyard train` trial written to the bucket, tracked in the study's MLflow child
    run that tune named in its run.json there; `tfyard evaluate` given the study's prefix
    restores its checkpoint (which of several trials is best: the stand-in study above).
    One trial: the suite's one real bucket study, kept short."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", experiment)
    s3.create_bucket(Bucket="tune-real")
    url, storage = "s3://tune-real/study", f"sqlite:///{tmp_path / 'study.db'}"
    space = write_space(tmp_path, "learning_rate: {loguniform: [0.01, 0.1]}\n")
    shared = [a for a in FAST if a not in ("--learning_rate", "0.05")]
    result = run_here(capsys, "tune", "--space", space, "--metric", "validation/top1",
                      "--mode", "max", "--trials", "1", "--storage", storage, "--output_dir",
                      url, "--epochs", "0.2", "--eval_every_epochs", "0.1", "--no_export",
                      *shared)
    assert result.returncode == 0, result.stderr[-3000:]
    best = optuna.load_study(study_name="study", storage=storage).best_trial
    names = {o["Key"] for o in s3.list_objects_v2(Bucket="tune-real")["Contents"]}
    assert {"study/tune.json", "study/trials/0000/checkpoints/checkpoint",
            "study/trials/0000/run.json"} <= names
    record = json.loads(s3.get_object(Bucket="tune-real", Key="study/trials/0000/run.json")
                        ["Body"].read())
    client = MlflowClient(tracking_uri=mlflow_uri)
    child = client.get_run(record["mlflow_run_id"])   # train tracked into tune's child
    assert child.data.tags["tfyard.trial"] == "0" and "mlflow.parentRunId" in child.data.tags
    assert child.info.status == "FINISHED" and child.data.tags.get("tfyard.best") == "true"
    assert child.data.metrics["eval_top1"] == best.value   # its last evaluation
    evaluated = run_here(capsys, "evaluate", "--output_dir", url)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    source = json.loads(evaluated.stdout)["source"]
    assert f"trials/{best.number:04d}/checkpoints/ckpt-" in source
