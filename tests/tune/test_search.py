"""Studies of stand-in trials: the real search loop, Optuna's storage read back, pruning,
failures, parallel trials and a rerun after tune's process group was killed."""

from __future__ import annotations

import csv
import json
import os
import signal

import pytest

from tests.tune.conftest import eval_records, killed_while_training, tune, write_space
from tfyard.errors import UserError

optuna = pytest.importorskip("optuna")
SPACE = {"learning_rate": {"loguniform": [0.001, 1.0]}, "epochs": 1}


def _argv(tmp_path, *extra, trials=3, space=SPACE):
    return ["--space", write_space(tmp_path, space), "--metric", "validation/top1", "--mode",
            "max", "--trials", trials, "--output_dir", tmp_path / "study", "--seed", 1, *extra]


def test_a_study_is_optunas_and_names_its_best_run(tmp_path, capsys):
    summary = tune(*_argv(tmp_path, "--parallel", 2, trials=4))
    threads = len(os.sched_getaffinity(0)) // 2   # the cores split between the two trials
    assert capsys.readouterr().out.startswith(f"tune: 2 trials at a time, {threads} of ")
    log = (tmp_path / "study" / "logs" / "0000.log").read_text()
    assert f"TF_NUM_INTRAOP_THREADS={threads}" in log
    study = optuna.load_study(study_name="study",
                              storage=f"sqlite:///{tmp_path / 'study' / 'study.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    best = study.best_trial
    saved = json.loads((tmp_path / "study" / "tune.json").read_text())
    assert saved == summary and saved["best_value"] == best.value
    assert saved["best_params"] == best.params
    assert saved["best_trial"]["run_dir"] == str(tmp_path / "study" / "trials" /
                                                 f"{best.number:04d}")
    rows = list(csv.DictReader((tmp_path / "study" / "trials.csv").open()))
    assert [float(r["learning_rate"]) for r in rows] == [t.params["learning_rate"]
                                                         for t in study.trials]
    assert (tmp_path / "study" / "tune.png").read_bytes().startswith(b"\x89PNG")
    records = eval_records(saved["best_trial"]["run_dir"])   # ten evaluations a trial
    assert [r["step"] for r in records] == list(range(10, 101, 10))
    assert records[-1]["top1"] == best.value


@pytest.mark.parametrize("visible, shares", [("0,1", {"0", "1"}), ("3", {"3"})])
def test_parallel_trials_are_placed_on_gpus_with_memory_growth(tmp_path, capsys, monkeypatch,
                                                                 visible, shares):
    """Each trial sees its own GPU where there are as many as trials, else trials share one;
    the first line says which, each trial's environment has it, and so does its record."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    tune(*_argv(tmp_path, "--parallel", 2, trials=3))
    first = capsys.readouterr().out.splitlines()[0]
    assert ("own GPU(s): 0 | 1" if len(shares) == 2 else "2 trials share GPU(s) 3") in first
    study = optuna.load_study(study_name="study",
                              storage=f"sqlite:///{tmp_path / 'study' / 'study.db'}")
    given = [t.user_attrs["cuda_visible_devices"] for t in study.trials]
    assert set(given[:2]) == shares   # the two started together: one GPU each, or the one
    for trial, devices in zip(study.trials, given, strict=True):
        log = (tmp_path / "study" / "logs" / f"{trial.number:04d}.log").read_text()
        assert f"stand-in: GPUs {devices}, memory growth true" in log


def test_trials_of_a_machine_without_gpus_get_none(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    tune(*_argv(tmp_path, trials=1))
    log = (tmp_path / "study" / "logs" / "0000.log").read_text()
    assert "stand-in: GPUs , memory growth None" in log


@pytest.mark.parametrize("budget", [("--train_steps", 50), ("--max_number_of_steps", 50)])
def test_a_budget_in_steps_spaces_ten_evaluations_over_it(tmp_path, budget):
    summary = tune(*_argv(tmp_path, *budget, trials=2, space={
        "learning_rate": {"loguniform": [0.001, 1.0]}}))
    assert summary["trials"]["complete"] == 2
    for trial in ("0000", "0001"):
        records = eval_records(tmp_path / "study" / "trials" / trial)
        assert [r["step"] for r in records] == list(range(5, 51, 5))


def test_searched_steps_space_each_trials_evaluations_over_its_own(tmp_path):
    space = {"learning_rate": 0.1, "train_steps": {"choice": [20, 40]}}
    tune(*_argv(tmp_path, "--sampler", "grid", trials=2, space=space))
    steps = sorted([r["step"] for r in eval_records(tmp_path / "study" / "trials" / t)]
                   for t in ("0000", "0001"))
    assert steps == [list(range(2, 21, 2)), list(range(4, 41, 4))]


def test_a_study_without_a_budget_is_refused_naming_both(tmp_path):
    with pytest.raises(UserError, match="--train_steps or --epochs"):
        tune(*_argv(tmp_path, space={"learning_rate": {"loguniform": [0.001, 1.0]}}))


def test_a_tie_goes_to_the_earlier_trial(tmp_path):
    """learning_rate 0.01 and 1.0 are equally far from the stand-in's best, 0.1."""
    space = {"learning_rate": {"choice": [1.0, 0.01]}, "epochs": 1}
    summary = tune(*_argv(tmp_path, "--sampler", "grid", trials=2, space=space))
    values = [json.loads(line)["top1"] for trial in ("0000", "0001") for line in
              (tmp_path / "study" / "trials" / trial / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["step"] == 100]
    assert values[0] == values[1]
    assert summary["best_trial"]["number"] == 0 and summary["ties"].startswith("the earlier")


def test_a_grid_runs_each_choice_once(tmp_path):
    space = {"learning_rate": {"choice": [0.01, 0.1]}, "epochs": 1}
    summary = tune(*_argv(tmp_path, "--sampler", "grid", trials=5, space=space))
    assert summary["trials"]["complete"] == 2 and summary["best_params"] == {
        "learning_rate": 0.1}


def test_a_pruned_trial_stops_early_and_is_marked(tmp_path, monkeypatch):
    monkeypatch.setenv("STAND_IN_STEP_S", "0.15")
    summary = tune(*_argv(tmp_path, "--scheduler", "asha", "--sampler", "random",
                          "--min_resource", 0.1, trials=5))   # rungs at evaluations 1, 4
    study = optuna.load_study(study_name="study",
                              storage=f"sqlite:///{tmp_path / 'study' / 'study.db'}")
    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert pruned and summary["trials"]["pruned"] == len(pruned)
    for trial in pruned:   # ended by SIGTERM before its last evaluation
        assert eval_records(trial.user_attrs["run_dir"])[-1]["step"] < 100
        # at a rung, evaluation 1 or 4 of its ten (Optuna's steps: evaluation numbers)
        assert sorted(trial.intermediate_values) == list(range(1, max(
            trial.intermediate_values) + 1)) and max(trial.intermediate_values) in (1, 4)


def test_a_pruned_trial_is_reported_with_the_figure_it_was_pruned_at(tmp_path, monkeypatch,
                                                                     capsys):
    """Reports written after the one that pruned (before the SIGTERM lands) change
    nothing: the line and Optuna's value are the pruning evaluation's."""
    monkeypatch.setenv("STAND_IN_STEP_S", "0.03")   # several reports between two reads
    tune(*_argv(tmp_path, "--scheduler", "asha", "--sampler", "random", "--min_resource", 0.1,
                trials=9))
    study = optuna.load_study(study_name="study",
                              storage=f"sqlite:///{tmp_path / 'study' / 'study.db'}")
    lines = [line for line in capsys.readouterr().out.splitlines() if " pruned at " in line]
    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert pruned
    for trial in pruned:
        rung = max(trial.intermediate_values)
        step = 10 * rung   # the stand-in's evaluations: every 10 steps, numbered 1..10
        figure = next(r["top1"] for r in eval_records(trial.user_attrs["run_dir"])
                      if r["step"] == step)
        assert trial.value == trial.intermediate_values[rung] == figure
        assert f"tune: trial {trial.number} pruned at step {step}: validation/top1 " \
               f"{figure:.4g}" in lines


def test_failed_trials_are_recorded_until_max_failures(tmp_path, monkeypatch):
    monkeypatch.setenv("STAND_IN_FAIL_ABOVE", "0")   # every trial diverges
    with pytest.raises(UserError, match="2 trials failed, more than --max_failures 1"):
        tune(*_argv(tmp_path, "--max_failures", 1, trials=5))
    rows = list(csv.DictReader((tmp_path / "study" / "trials.csv").open()))
    assert [r["state"] for r in rows] == ["fail", "fail"]
    assert "diverged" in (tmp_path / "study" / "logs" / "0000.log").read_text()


def test_sigterm_stops_the_trials_and_leaves_them_to_resume(tmp_path):
    argv = [str(a) for a in _argv(tmp_path, trials=2)]
    assert killed_while_training(tmp_path, argv, signal.SIGTERM) == 143
    study = optuna.load_study(study_name="study",
                              storage=f"sqlite:///{tmp_path / 'study' / 'study.db'}")
    assert [t.state.name for t in study.trials] == ["RUNNING"]


def test_a_rerun_after_a_kill_continues_the_study(tmp_path):
    """SIGKILL of tune's process group takes its trial along; the same command again resumes
    that trial in its own directory with its own params and runs the rest."""
    argv = [str(a) for a in _argv(tmp_path, trials=2)]
    assert killed_while_training(tmp_path, argv, signal.SIGKILL) == -signal.SIGKILL
    first = tmp_path / "study" / "trials" / "0000" / "metrics.jsonl"
    storage = f"sqlite:///{tmp_path / 'study' / 'study.db'}"
    left = optuna.load_study(study_name="study", storage=storage).trials[0]
    assert left.state.name == "RUNNING"

    summary = tune(*argv)
    trials = optuna.load_study(study_name="study", storage=storage).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert trials[0].params == left.params and summary["trials"]["complete"] == 2
    steps = [r["step"] for r in eval_records(first.parent)]
    assert steps == list(range(10, 101, 10))   # continued after its last report
