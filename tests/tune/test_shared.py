"""Two `tfyard tune` processes on one --storage share one study (Optuna's distributed mode):
together they run --trials trials, each once, each in its own run directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.tune import postgres
from tests.tune.conftest import TUNE_CODE, eval_records, tune, write_space
from tfyard.errors import UserError
from tfyard.runfiles.place import StudyPlace
from tfyard.tune import study as studies
from tfyard.tune.search import _ask

optuna = pytest.importorskip("optuna")


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request, tmp_path) -> tuple[str, str]:
    """(the storage URL two tunes share, the study's name in it): SQLite on this machine, a
    real PostgreSQL server as across machines (as users write its URL: postgresql://)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}", "shared"
    return request.getfixturevalue("postgres_url"), f"shared-{uuid.uuid4().hex[:8]}"


def test_two_tunes_on_one_storage_run_the_trials_once_between_them(tmp_path, storage):
    storage, name = storage
    space = write_space(tmp_path, {"learning_rate": {"loguniform": [0.001, 1.0]}, "epochs": 1})
    tunes = [subprocess.Popen(
        [sys.executable, "-c", TUNE_CODE, "--space", space, "--metric", "validation/top1",
         "--mode", "max", "--trials", "4", "--output_dir", str(tmp_path / where), "--storage",
         storage, "--study_name", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**os.environ, "STAND_IN_STEP_S": "0.01"}) for where in ("a", "b")]
    outputs = [tune.communicate(timeout=120)[0] for tune in tunes]
    assert [tune.returncode for tune in tunes] == [0, 0], outputs

    trials = optuna.load_study(study_name=name,
                               storage=studies.open_storage(storage)).trials
    done = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(done) == 4 and all(t.user_attrs.get(studies.SURPLUS) for t in trials
                                  if t not in done)
    run_dirs = {t.number: t.user_attrs["run_dir"] for t in done}
    ran = {name: sorted(int(p.name) for p in (tmp_path / name / "trials").iterdir())
           for name in ("a", "b")}
    assert ran["a"] and ran["b"] and sorted(ran["a"] + ran["b"]) == sorted(run_dirs)
    for number, run_dir in run_dirs.items():   # each trial ran once, in its tune's DIR
        assert run_dir == str(tmp_path / ("a" if number in ran["a"] else "b") / "trials" /
                              f"{number:04d}")
        assert [r["step"] for r in eval_records(run_dir)] == list(range(10, 101, 10))
    summaries = [json.loads((tmp_path / name / "tune.json").read_text()) for name in "ab"]
    last = max(summaries, key=lambda s: s["trials"]["complete"])   # the tune that ended last
    assert last["trials"]["complete"] == 4
    assert last["best_value"] == max(t.value for t in done)


def test_a_wrong_password_is_one_line_that_shows_it_as_stars(tmp_path, postgres_url):
    wrong = postgres_url.replace(postgres.PASSWORD, "not-the-password")
    with pytest.raises(UserError) as refused:
        tune(*["--space", write_space(tmp_path, {"learning_rate": 0.1, "epochs": 1}),
               "--metric", "validation/top1", "--mode", "max", "--trials", 1, "--output_dir",
               tmp_path / "study", "--storage", wrong])
    line = str(refused.value)
    assert "\n" not in line and f"postgresql://{postgres.USER}:***@127.0.0.1:" in line
    assert "not-the-password" not in line and "password authentication failed" in line
    assert not (tmp_path / "study").exists()


def test_a_trial_asked_past_the_studys_count_is_surplus_and_never_run(tmp_path, capsys):
    """Two tunes that both saw room for one more trial both ask: the one numbered past
    --trials is told failed, marked surplus, and counted as such in tune.json."""
    study = optuna.create_study(study_name="s", direction="maximize")
    states = optuna.trial.TrialState
    first = _ask(study, states, wanted=2)
    study.tell(first, 0.5)
    second = _ask(study, states, wanted=2)   # both tunes asked here
    assert _ask(study, states, wanted=2) is None
    assert "trial 2 not run: the study has its 2 trials" in capsys.readouterr().out
    study.tell(second, 0.7)
    summary = studies.write_summary(study, StudyPlace(str(tmp_path)), "sqlite:///x.db",
                                    "validation/top1", {})
    assert summary["trials"]["complete"] == 2 and summary["trials"]["surplus"] == 1
    assert summary["trials"]["fail"] == 0 and summary["best_trial"]["number"] == 1
    assert (tmp_path / "trials.csv").read_text().splitlines()[3].startswith("2,surplus,")
