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


def test_a_bucket_study_without_a_storage_url_is_one_line_before_any_trial(tmp_path):
    with pytest.raises(UserError, match="^--output_dir in a bucket needs --storage URL") \
            as refused:
        tune(*_argv(tmp_path))
    assert "\n" not in str(refused.value)
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
@pytest.mark.parametrize("on", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_a_real_tracked_study_in_a_bucket_evaluates_with_its_best_run(
        on, s3, tmp_path, capsys, monkeypatch, mlflow_uri, experiment, request):  # noqa: F811
    """A real `tfyard train` trial written to the bucket, here or as a Ray actor (which
    reaches the bucket and MLflow with tune's settings), tracked in the study's MLflow child
    run that tune named in its run.json there; `tfyard evaluate` given the study's prefix
    restores its checkpoint (which of several trials is best: the stand-in study above).
    One trial each: the suite's real tracked bucket studies, kept short."""
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
                      *shared, *(["--on", "ray", "--address", request.getfixturevalue(
                          "ray_address")] if on == "ray" else []))
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


@pytest.mark.slow
def test_a_real_pbt_study_in_a_bucket_hands_the_checkpoint_over_in_the_bucket(
        s3, tmp_path, capsys):  # noqa: F811
    """Two real trials in a bucket stop at step 7; the worse goes on from the better's
    checkpoint, published into its own prefix (the same bytes there), in its own run with
    the perturbed learning rate, its local copy continuing the bucket (nothing set aside)."""
    s3.create_bucket(Bucket="tune-pbt")
    url, storage = "s3://tune-pbt/study", f"sqlite:///{tmp_path / 'study.db'}"
    space = write_space(tmp_path, "learning_rate: {loguniform: [0.01, 0.2]}\n")
    shared = [a for a in FAST if a not in ("--learning_rate", "0.05")]
    result = run_here(capsys, "tune", "--space", space, "--metric", "validation/top1", "--mode",
                      "max", "--trials", "2", "--parallel", "2", "--scheduler", "pbt",
                      "--pbt_interval", "7", "--storage", storage, "--output_dir", url,
                      "--epochs", "0.3", "--eval_every_epochs", "0.15", "--no_export", *shared)
    assert result.returncode == 0, result.stderr[-3000:]

    def read(key: str) -> bytes:
        return s3.get_object(Bucket="tune-pbt", Key=f"study/{key}")["Body"].read()

    names = {o["Key"] for o in s3.list_objects_v2(Bucket="tune-pbt")["Contents"]}
    (schedule,) = [n for n in names if n.endswith("/pbt.json")]
    recipient = schedule.split("/")[2]
    (entry,) = json.loads(read(f"trials/{recipient}/pbt.json"))
    donor = f"{entry['donor']:04d}"
    assert entry["step"] == 7 and donor != recipient
    data = "checkpoints/ckpt-7.data-00000-of-00001"
    assert read(f"trials/{recipient}/{data}") == read(f"trials/{donor}/{data}")
    record = json.loads(read(f"trials/{recipient}/run.json"))
    assert record["learning_rate"] == entry["params"]["learning_rate"]
    assert record["output_dir"] == f"{url}/trials/{recipient}"
    reports = [json.loads(line) for line in
               read(f"trials/{recipient}/metrics.jsonl").decode().splitlines()]
    steps = [r["step"] for r in reports if r["kind"] == "train"]
    assert steps[-1] == 14 and 7 in steps
    assert b"does not continue" not in read(f"logs/{recipient}.log")
    study = optuna.load_study(study_name="study", storage=storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 2
    assert study.trials[int(recipient)].user_attrs["pbt_schedule"] == [entry]
    assert "pbt_round" not in study.user_attrs or study.user_attrs["pbt_round"] is None


@pytest.mark.ray
def test_a_study_in_a_bucket_runs_its_trials_on_ray(s3, ray_address, tmp_path):  # noqa: F811
    """Each trial a Ray actor whose member reaches the bucket with tune's store settings
    (`launch.context.passed_env`); tune reads its reports from the bucket."""
    pytest.importorskip("ray")
    s3.create_bucket(Bucket=BUCKET)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    summary = tune(*_argv(tmp_path, "--storage", storage, "--trials", 1, "--on", "ray",
                          "--address", ray_address))
    [trial] = optuna.load_study(study_name="one", storage=storage).trials
    assert trial.state.name == "COMPLETE" and summary["best_value"] == trial.value
    reports = [json.loads(line) for line in
               _objects(s3)["trials/0000/metrics.jsonl"].decode().splitlines()]
    assert reports[-1]["top1"] == trial.value and len(reports) == 10
    assert sorted(trial.intermediate_values) == list(range(1, 11))
