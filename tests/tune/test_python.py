"""`tfyard.tune(...)`, the Python door to `tfyard tune`: the same checks and the same search
(the CLI calls it), with the space as a mapping and train options as keywords."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.tune.conftest import eval_records, stand_in_tune
from tfyard.errors import UserError
from tfyard.tune.checked import trial_argv

optuna = pytest.importorskip("optuna")
SPACE = {"learning_rate": {"loguniform": [0.001, 1.0]}}


def build(num_classes, input_shape):   # a user's model function, named to the trials
    raise AssertionError("the trials import it; this process never calls it")


def test_the_python_door_runs_the_study_and_returns_its_summary(tmp_path):
    summary = stand_in_tune(space=SPACE, metric="validation/top1", mode="max", trials=2,
                            output_dir=str(tmp_path / "study"), seed=1, epochs=1)
    assert summary == json.loads((tmp_path / "study" / "tune.json").read_text())
    assert summary["trials"]["complete"] == 2 and summary["best_params"].keys() == {
        "learning_rate"}
    steps = [r["step"] for r in eval_records(summary["best_trial"]["run_dir"])]
    assert steps == list(range(10, 101, 10))   # --epochs 1 reached the trials


def test_model_data_and_options_become_the_trials_flags():
    assert trial_argv(build, "cifar10", {"batch_size": 64}) == [
        "--model", f"{__name__}:build", "--dataset", "cifar10", "--batch_size", "64"]


@pytest.mark.parametrize("settings, words", [
    ({"mode": "maximize"}, "--mode maximize: give one of max, min"),
    ({"trials": 0}, "--trials 0: 0 must be a positive integer"),
    ({"trials": 2.5}, "--trials 2.5: give an integer"),
    ({"trials": True}, "--trials True: give an integer"),
    ({"metric": None}, "--metric is required (in Python, metric=...)"),
    ({"min_resource": 1}, "--min_resource is for --scheduler median or asha, not none"),
    ({"scheduler": "asha", "min_resource": 1}, "--min_resource 1 is past the trials' whole "
     "budget of 1 epochs; give less than 1 (epochs)"),
    ({"sampler": "cmaes"}, "--sampler cmaes: give one of tpe, random, grid"),
    ({"learnig_rate": 0.1}, "tfyard.tune: unknown option(s) learnig_rate"),
    ({"model": lambda num_classes, input_shape: None}, "lambda or nested function"),
    ({"space": {"learning_rate": {"uniform": [0.5, 0.1]}}}, "--space: learning_rate: "
     "uniform needs lo < hi"),
    ({"space": SPACE, "learning_rate": 0.1}, "learning_rate: both in --space and on the "
     "command line"),
    ({"train_argv": ["--bogus_option", "1"]}, "unrecognized arguments: --bogus_option 1"),
    ({"metric": "validation/accuracy"}, "--metric validation/accuracy: not a figure"),
])
def test_wrong_input_is_a_user_error_worded_as_the_cli(tmp_path, settings, words):
    given = {"space": SPACE, "metric": "validation/top1", "mode": "max", "trials": 2,
             "output_dir": str(tmp_path / "study"), "epochs": 1, **settings}
    with pytest.raises(UserError) as refused:
        stand_in_tune(**given)
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "study" / "trials").exists()


def test_import_tfyard_stays_light():
    code = ("import sys, tfyard; assert callable(tfyard.tune); "
            "heavy = {m.split('.')[0] for m in sys.modules} & {'optuna', 'tensorflow', 'keras'}; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
