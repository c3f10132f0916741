"""A study keeps its identity: what it searches (metric, direction, space, sampler,
scheduler, the shared train flags) is recorded in Optuna's storage when it is created, and a
later command that disagrees is refused in one line before it writes anything; a command
refused for any reason leaves no study behind."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.tune.conftest import tune, write_space
from tfyard.errors import UserError
from tfyard.tune.study import _given

optuna = pytest.importorskip("optuna")
SPACE = {"learning_rate": {"loguniform": [0.001, 1.0]}, "epochs": 1}


def _argv(tmp_path, *extra, space=SPACE, mode="max", metric="validation/top1"):
    return ["--space", write_space(tmp_path, space), "--metric", metric, "--mode", mode,
            "--trials", 1, "--output_dir", tmp_path / "study", "--seed", 1, *extra]


def _storage(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'study' / 'study.db'}"


@pytest.fixture
def study(tmp_path):
    """A study of one finished trial; its database's bytes before anything else runs."""
    tune(*_argv(tmp_path, "--batch_size", 32))
    return (tmp_path / "study" / "study.db").read_bytes()


def test_the_identity_is_in_the_study_and_in_tune_json(tmp_path, study):
    recorded = optuna.load_study(study_name="study", storage=_storage(tmp_path)).user_attrs[
        "tfyard.identity"]
    assert recorded["metric"] == "validation/top1" and recorded["direction"] == "maximize"
    assert json.loads(recorded["train"]) == {"batch_size": 32}
    assert json.loads(recorded["space"]) == SPACE
    summary = json.loads((tmp_path / "study" / "tune.json").read_text())
    assert summary["identity"] == recorded


@pytest.mark.parametrize("change, recorded, given", [
    ({"metric": "validation/loss", "mode": "min"}, "--metric validation/top1",
     "--metric validation/loss"),
    ({"mode": "min"}, "--mode max", "--mode min"),
    ({"space": {"learning_rate": {"loguniform": [0.01, 1.0]}, "epochs": 1}}, "--space",
     "--space"),
    ({"extra": ("--batch_size", 64)}, "--batch_size 32", "--batch_size 64"),
    ({"extra": ("--batch_size", 32, "--sampler", "random")}, "--sampler tpe",
     "--sampler random"),
    ({"extra": ("--batch_size", 32, "--seed", 2)}, "--seed 1", "--seed 2"),
])
def test_a_command_that_disagrees_is_refused_in_one_line_and_writes_nothing(
        tmp_path, study, change, recorded, given):
    argv = _argv(tmp_path, *change.get("extra", ("--batch_size", 32)),
                 space=change.get("space", SPACE), mode=change.get("mode", "max"),
                 metric=change.get("metric", "validation/top1"))
    with pytest.raises(UserError) as refused:
        tune(*argv)
    line = str(refused.value)
    assert "\n" not in line and recorded in line and given in line and "--study_name" in line
    assert (tmp_path / "study" / "study.db").read_bytes() == study
    assert sorted(os.listdir(tmp_path / "study" / "trials")) == ["0000"]


def test_every_part_of_the_identity_is_named_as_a_command_gives_it(tmp_path, study):
    recorded = optuna.load_study(study_name="study", storage=_storage(tmp_path)).user_attrs[
        "tfyard.identity"]
    for key, value in recorded.items():
        assert _given(key, value).startswith(("--", "no ")), key
    assert _given("seed", None) == "no --seed" and _given("min_resource", 3) == \
        "--min_resource 3"


def test_the_same_command_continues_and_another_name_starts_anew_in_its_own_dir(
        tmp_path, study):
    tune(*_argv(tmp_path, "--batch_size", 32))   # the same: nothing more to run, accepted
    tune(*_argv(tmp_path, "--batch_size", 64, "--study_name", "other",
                "--storage", _storage(tmp_path) + "x", "--output_dir", tmp_path / "other"))
    assert [s.study_name for s in optuna.get_all_study_summaries(_storage(tmp_path) + "x")] \
        == ["other"]


@pytest.mark.parametrize("how", ["another --study_name", "a copied folder"])
def test_a_second_study_in_a_study_dir_is_refused(tmp_path, study, how):
    """Trial folders are numbered by trial alone: a second study in DIR would take the
    first one's finished runs for its own trials."""
    if how == "a copied folder":
        shutil.copytree(tmp_path / "study", tmp_path / "copy")
        argv = _argv(tmp_path, "--batch_size", 32, "--output_dir", tmp_path / "copy")
        place = tmp_path / "copy"
    else:
        argv, place = _argv(tmp_path, "--batch_size", 32, "--study_name", "other"), \
            tmp_path / "study"
    before = (place / "study.db").read_bytes()
    with pytest.raises(UserError) as refused:
        tune(*argv)
    line = str(refused.value)
    assert "\n" not in line and "holds study 'study'" in line and "--study_name study" in line
    assert (place / "study.db").read_bytes() == before
    assert optuna.study.get_all_study_names(f"sqlite:///{place / 'study.db'}") == ["study"]


def test_a_study_of_an_earlier_tfyard_is_checked_by_its_direction_and_then_recorded(
        tmp_path, study):
    storage = optuna.storages.RDBStorage(_storage(tmp_path))
    study_id = storage.get_study_id_from_name("study")
    storage.set_study_user_attr(study_id, "tfyard.identity", None)   # as before the record
    with pytest.raises(UserError, match="--mode max, and this command gives --mode min"):
        tune(*_argv(tmp_path, "--batch_size", 32, mode="min"))
    tune(*_argv(tmp_path, "--batch_size", 32))
    assert optuna.load_study(study_name="study", storage=_storage(tmp_path)).user_attrs[
        "tfyard.identity"]["direction"] == "maximize"


def test_a_command_refused_for_another_reason_leaves_no_study(tmp_path):
    with pytest.raises(UserError, match="--parallel"):
        tune(*_argv(tmp_path, "--parallel", 10_000))
    assert not (tmp_path / "study").exists()


def test_a_refused_mlflow_uri_is_one_line_and_leaves_no_study(tmp_path):
    with pytest.raises(UserError) as refused:
        tune(*_argv(tmp_path, "--mlflow_uri", "ftp://nowhere/mlflow"))
    line = str(refused.value)
    assert "\n" not in line and "MLflow takes no such URI" in line
    assert not (tmp_path / "study").exists()


def test_where_runs_are_tracked_is_not_what_the_study_searches(tmp_path, study):
    """A rerun may log to another MLflow: the tracking options are left out of the
    identity."""
    tracked = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tune(*_argv(tmp_path, "--batch_size", 32, "--mlflow_uri", tracked))
    recorded = optuna.load_study(study_name="study", storage=_storage(tmp_path)).user_attrs[
        "tfyard.identity"]
    assert json.loads(recorded["train"]) == {"batch_size": 32}
