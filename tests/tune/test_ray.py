"""`tfyard tune --on ray` on a local Ray (127.0.0.1, 2 CPUs): a stand-in trial as a
`tfyard launch ray` gang of two members (one trial: each costs a launcher's start), the
study read back with Optuna's own API."""

from __future__ import annotations

import pytest

from tests.tune.conftest import eval_records, tune, write_space
from tfyard.errors import UserError

optuna = pytest.importorskip("optuna")
pytest.importorskip("ray")
pytestmark = pytest.mark.ray


def _argv(tmp_path, address, *extra):
    space = write_space(tmp_path, {"learning_rate": {"loguniform": [0.001, 1.0]}, "epochs": 1})
    return ["--space", space, "--metric", "validation/top1", "--mode", "max", "--trials", 1,
            "--output_dir", tmp_path / "study", "--seed", 1, "--on", "ray", "--address",
            address, *extra]


def test_trials_run_as_ray_gangs_and_the_study_is_optunas(ray_address, tmp_path, capsys):
    summary = tune(*_argv(tmp_path, ray_address, "--workers", 2))
    assert f"tune: on Ray at {ray_address}: 1 trial(s) at a time, each 2 worker(s)" in \
        capsys.readouterr().out
    study = optuna.load_study(study_name="study",
                              storage=f"sqlite:///{tmp_path / 'study' / 'study.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE"]
    assert summary["best_value"] == study.best_value
    for trial in study.trials:
        log = (tmp_path / "study" / "logs" / f"{trial.number:04d}.log").read_text()
        assert "stand-in: member worker:0" in log and "stand-in: member worker:1" in log
        assert "TF_NUM_INTRAOP_THREADS=1" in log   # a member's share: the CPU it reserved
        records = eval_records(trial.user_attrs["run_dir"])   # worker 0's run alone
        assert [r["step"] for r in records] == list(range(10, 101, 10))
        assert records[-1]["top1"] == trial.value


def test_more_trials_than_the_cluster_holds_are_refused(ray_address, tmp_path):
    with pytest.raises(UserError, match=r"--parallel 2 x --workers 2 x 1 CPU = 4 CPU, more "
                       r"than the Ray cluster's 2"):
        tune(*_argv(tmp_path, ray_address, "--workers", 2, "--parallel", 2))
