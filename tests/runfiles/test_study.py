"""A run's directory and a study's are two kinds: `tfyard train` refuses a study's DIR and
`tfyard tune` a run's, each in one line, before anything is written."""

from __future__ import annotations

import os

import pytest

from tests.tune.conftest import tune, write_space
from tfyard.cli import main
from tfyard.errors import UserError


@pytest.mark.parametrize("held", ["tune.json", "study.db"])
def test_train_refuses_a_studys_dir(tmp_path, capsys, held):
    study = tmp_path / "study"
    study.mkdir()
    (study / held).write_text("{}")
    assert main(["train", "--dataset", "digits", "--train_steps", "1",
                 "--output_dir", str(study)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "holds a study" in err[-1] and "another --output_dir" in err[-1]
    assert not any("Traceback" in line for line in err)
    assert os.listdir(study) == [held] and (study / held).read_text() == "{}"


def test_tune_refuses_a_runs_dir(tmp_path):
    pytest.importorskip("optuna")
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"model": "cifar_resnet8"}\n')
    space = write_space(tmp_path, {"learning_rate": {"loguniform": [0.001, 1.0]}, "epochs": 1})
    with pytest.raises(UserError, match="holds a run `tfyard train` wrote"):
        tune("--space", space, "--metric", "validation/top1", "--mode", "max", "--trials", 1,
             "--output_dir", run)
    assert sorted(os.listdir(run)) == ["run.json"]
