"""`--seed` reproduces through kills: each trial's draw is a function of the study's seed,
the tune's DIR and the trial's number, never of a process-long stream, so a study SIGKILLed
and run again gives every trial number the parameters and the value the unbroken study gave;
two tunes sharing a study with one seed draw apart."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from tests.tune.conftest import TUNE_CODE, killed_while_training, tune, write_space

optuna = pytest.importorskip("optuna")
SPACE = {"learning_rate": {"loguniform": [0.001, 1.0]}, "epochs": 1}


def _argv(tmp_path, *extra, trials=4):
    return ["--space", write_space(tmp_path, SPACE), "--metric", "validation/top1", "--mode",
            "max", "--trials", trials, "--output_dir", tmp_path / "study", "--seed", 7, *extra]


def _drawn(tmp_path) -> list[tuple[int, dict, float | None]]:
    study = optuna.load_study(study_name="study",
                              storage=f"sqlite:///{tmp_path / 'study' / 'study.db'}")
    return [(t.number, t.params, t.value) for t in study.trials]


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_a_study_killed_after_its_second_trial_and_rerun_matches_an_unbroken_one(
        tmp_path, monkeypatch, sampler):
    argv = [str(a) for a in _argv(tmp_path, "--sampler", sampler)]
    tune(*argv)
    unbroken = _drawn(tmp_path)
    shutil.rmtree(tmp_path / "study")   # the same DIR again: the same study
    assert killed_while_training(tmp_path, argv, signal.SIGKILL, reports=2, trial=1) == -9
    assert len(_drawn(tmp_path)) == 2   # killed during its second trial
    monkeypatch.setenv("STAND_IN_STEP_S", "0.01")
    tune(*argv)
    assert _drawn(tmp_path) == unbroken


def test_two_tunes_on_one_study_with_one_seed_draw_apart(tmp_path):
    space = write_space(tmp_path, SPACE)
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    tunes = [subprocess.Popen(
        [sys.executable, "-c", TUNE_CODE, "--space", space, "--metric", "validation/top1",
         "--mode", "max", "--trials", "4", "--output_dir", str(tmp_path / name), "--storage",
         storage, "--study_name", "shared", "--seed", "7"], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env={**os.environ, "STAND_IN_STEP_S": "0.01"})
        for name in ("a", "b")]
    outputs = [t.communicate(timeout=120)[0] for t in tunes]
    assert [t.returncode for t in tunes] == [0, 0], outputs
    trials = optuna.load_study(study_name="shared", storage=storage).trials
    drawn = [t.params["learning_rate"] for t in trials if t.params]
    assert len(drawn) >= 4 and len(set(drawn)) == len(drawn)


def test_the_same_dir_spelled_otherwise_draws_the_same(tmp_path, monkeypatch):
    """DIR is the tune's identity as a folder, not as a spelling: relative, `./`, a
    trailing `/` or absolute, a seeded study draws the same, and so does one in another
    folder (its own database: no other tune can share it)."""
    monkeypatch.chdir(tmp_path)
    drawn = []
    for spelling in ("study", "./study/", str(tmp_path / "study"), "elsewhere/study"):
        tune(*_argv(tmp_path, trials=2), "--output_dir", spelling)
        shutil.move(os.path.normpath(spelling), tmp_path / "study")
        drawn.append(_drawn(tmp_path))
        shutil.rmtree(tmp_path / "study")
    assert drawn[0] == drawn[1] == drawn[2] == drawn[3]
