"""Pruning starts where figures mean something: past a trial's first epoch and its warm-up by
default, at --min_resource when given; learned once, recorded in the study, said in a line."""

import optuna
import pytest

from tests.tune.conftest import tune, write_space
from tfyard.tune.rungs import FIRST_RUNG, Rungs

SPACE = {"learning_rate": {"loguniform": [0.001, 1.0]}}


def _study(tmp_path):
    return optuna.load_study(study_name="study",
                             storage=f"sqlite:///{tmp_path / 'study' / 'study.db'}")


def _argv(tmp_path, *extra, trials=6):
    return ["--space", write_space(tmp_path, SPACE), "--metric", "validation/top1", "--mode",
            "max", "--trials", trials, "--output_dir", tmp_path / "study", "--seed", 3,
            "--sampler", "random", *extra]


def test_by_default_asha_prunes_only_past_the_first_epoch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STAND_IN_STEP_S", "0.1")
    tune(*_argv(tmp_path, "--scheduler", "asha", "--epochs", 3))   # 100 steps an epoch
    out = capsys.readouterr().out
    assert "tune: asha prunes from the first evaluation past a trial's first epoch and its " \
           "learning-rate warm-up" in out
    assert "tune: asha's rungs at evaluation(s) 4 of 10 (past the first epoch (100 steps) " \
           "and a warm-up of 0 steps)" in out
    study = _study(tmp_path)
    assert study.user_attrs[FIRST_RUNG] == 4
    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert pruned, out
    assert all(max(t.intermediate_values) == 4 for t in pruned)


def test_the_warm_up_moves_the_first_rung_and_a_rerun_keeps_it(tmp_path, monkeypatch,
                                                              capsys):
    monkeypatch.setenv("STAND_IN_STEP_S", "0.02")
    argv = _argv(tmp_path, "--scheduler", "median", "--epochs", 3, "--warmup_epochs", 2,
                 trials=7)
    tune(*argv)
    assert "tune: median prunes from evaluation(s) 7 of 10 on (past the first epoch (100 " \
           "steps) and a warm-up of 200 steps)" in capsys.readouterr().out
    study = _study(tmp_path)
    assert all(max(t.intermediate_values) >= 7 for t in study.trials)
    argv[argv.index("--trials") + 1] = 8
    tune(*argv)
    assert "tune: median prunes from evaluation(s) 7 of 10 on (as the study recorded it)" \
        in capsys.readouterr().out


@pytest.mark.parametrize("budget, min_resource, warmup, first, why", [
    # 3 epochs of 46 steps, evaluations every 0.3 epochs (13.8 steps): past step 46
    ("epochs", None, 0, 4, "past the first epoch (46 steps) and a warm-up of 0"),
    ("epochs", 0.5, 0, 2, "past --min_resource 0.5 epochs"),
    ("train_steps", 40, 0, 3, "past --min_resource 40 steps"),
    # the first epoch ends past the whole budget: half of it
    ("epochs", None, 200, 5, "half the budget: it ends before the first rung past"),
])
def test_the_first_rung_in_evaluations(budget, min_resource, warmup, first, why, capsys):
    rungs = Rungs("asha", 10, budget, min_resource)
    every = ("epochs", 0.3) if budget == "epochs" else ("train_steps", 13.8)
    record = {"step": 14, "epoch": 14 / 46}
    found, said = rungs._learned(record, warmup, every)
    assert found == first and said.startswith(why), said


def test_with_its_own_cadence_the_rung_is_a_training_step():
    rungs = Rungs("median", 0, "epochs", None)
    assert rungs._learned({"step": 50, "epoch": 0.5}, 30, None) == (
        100, "step 100: past the first epoch (100 steps) and a warm-up of 30 steps")
