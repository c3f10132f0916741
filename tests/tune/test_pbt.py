"""Population-based training: the exploit/explore decisions, and a population of stand-in
trials whose worst takes the best's checkpoint and perturbed values at each interval."""

from __future__ import annotations

import json
import math
import random
import signal

import pytest

from tests.tune.conftest import eval_records, killed_while_training, tune, write_space
from tfyard.tune.pbt import exploit, explore
from tfyard.tune.space import Param

optuna = pytest.importorskip("optuna")
LR = Param("learning_rate", "loguniform", (0.001, 1.0))


def test_the_bottom_quarter_takes_from_the_top_quarter():
    values = {number: number / 10 for number in range(8)}   # 7 is the best
    taken = exploit(values, maximize=True, rng=random.Random(0))
    assert sorted(taken) == [0, 1] and set(taken.values()) <= {6, 7}
    assert exploit(values, maximize=False, rng=random.Random(0)).keys() == {6, 7}
    assert exploit({3: 0.2, 5: 0.9}, maximize=True, rng=random.Random(0)) == {3: 5}


def test_explore_moves_each_value_by_a_fifth_within_its_range():
    rng = random.Random(0)
    for value in (0.001, 0.01, 1.0):
        moved = explore({"learning_rate": value}, [LR], rng)["learning_rate"]
        assert moved in (pytest.approx(min(1.0, value * 1.2)),
                         pytest.approx(max(0.001, value * 0.8)))


def quality(learning_rate: float) -> float:
    """What a stand-in trial gains an evaluation at this learning rate (stand_in.py)."""
    return (1.0 - abs(math.log10(learning_rate) + 1.0) / 4) * 0.1


def _population(tmp_path) -> list[str]:
    space = write_space(tmp_path, {"learning_rate": {"loguniform": [0.001, 1.0]}, "epochs": 1})
    return [str(a) for a in ("--space", space, "--metric", "validation/top1", "--mode", "max",
                             "--trials", 2, "--parallel", 2, "--scheduler", "pbt",
                             "--pbt_interval", 40, "--sampler", "random", "--seed", 1,
                             "--output_dir", tmp_path / "study")]


@pytest.mark.parametrize("killed", [False, True])
def test_the_worst_trial_goes_on_from_the_best_ones_checkpoint(tmp_path, killed):
    """Also after a SIGKILL of tune's process group as the first trial stops at step 40
    (the other may not have yet): the same command again keeps the population in step."""
    if killed:
        killed_while_training(tmp_path, _population(tmp_path), signal.SIGKILL, reports=4)
    summary = tune(*_population(tmp_path))
    study = optuna.load_study(study_name="study", storage=summary["storage"])
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    rounds = sorted((entry["step"], trial.number, entry) for trial in study.trials
                    for entry in trial.user_attrs.get("pbt_schedule", []))
    assert [step for step, _, _ in rounds] == [40, 80]   # one recipient a round
    for step, recipient, entry in rounds:
        run = study.trials[recipient].user_attrs["run_dir"]
        donor = study.trials[entry["donor"]].user_attrs["run_dir"]
        assert entry["donor"] != recipient
        given = {r["step"]: r["top1"] for r in eval_records(donor)}[step]
        after = {r["step"]: r["top1"] for r in eval_records(run)}[step + 10]
        assert after == pytest.approx(given + quality(entry["params"]["learning_rate"]))
    for trial in study.trials:   # the schedule is the trial's and its run's
        run = trial.user_attrs["run_dir"]
        schedule = trial.user_attrs.get("pbt_schedule")
        assert schedule is None or json.loads(open(f"{run}/pbt.json").read()) == schedule
        assert [r["step"] for r in eval_records(run)] == list(range(10, 101, 10))


def test_a_killed_seeded_population_follows_the_unbroken_schedule(tmp_path, monkeypatch):
    """With --seed, PBT SIGKILLed mid-interval and rerun draws the same values, donors and
    perturbations as the same study run unbroken; tune.json's best_params are the values in
    force when the best trial ended, not its first draw."""
    def run(where, kill: bool):
        where.mkdir()
        monkeypatch.chdir(where)   # the same --output_dir as given: `study`, in each
        argv = _population(where)
        argv[argv.index("--output_dir") + 1] = "study"
        if kill:
            killed_while_training(where, argv, signal.SIGKILL, reports=6)
        summary = tune(*argv)
        study = optuna.load_study(study_name="study", storage=summary["storage"])
        best = study.trials[summary["best_trial"]["number"]]
        schedule = best.user_attrs.get("pbt_schedule")
        assert summary["best_params"] == (schedule[-1]["params"] if schedule else best.params)
        return summary["best_params"], [(t.params, t.user_attrs.get("pbt_schedule"), t.value)
                                        for t in study.trials]

    assert run(tmp_path / "unbroken", False) == run(tmp_path / "killed", True)
