"""`tfyard tune --on ray` on a local Ray (127.0.0.1, 2 CPUs): a stand-in trial as a
`tfyard launch ray` gang of two members (one trial: each costs a launcher's start), the
study read back with Optuna's own API; a PBT population of two whose launchers end at each
interval."""

from __future__ import annotations

import pytest

from tests.tune.conftest import eval_records, tune, write_space
from tests.tune.test_pbt import quality
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


def test_a_pbt_population_on_ray_pauses_its_launchers_and_hands_a_checkpoint_over(
        ray_address, tmp_path, capsys):
    summary = tune(*_argv(tmp_path, ray_address, "--trials", 2, "--parallel", 2,
                          "--scheduler", "pbt", "--pbt_interval", 60))
    out = capsys.readouterr().out
    study = optuna.load_study(study_name="study", storage=summary["storage"])
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"], out
    [(recipient, entry)] = [(t, e) for t in study.trials
                            for e in t.user_attrs.get("pbt_schedule", [])]
    assert entry["step"] == 60 and entry["donor"] != recipient.number, out
    assert f"tune: trial {recipient.number} (validation/top1" in out
    given = {r["step"]: r["top1"] for r in eval_records(
        study.trials[entry["donor"]].user_attrs["run_dir"])}[60]
    after = {r["step"]: r["top1"] for r in eval_records(recipient.user_attrs["run_dir"])}[70]
    assert after == pytest.approx(given + quality(entry["params"]["learning_rate"]))
    for trial in study.trials:   # each launcher ended at the pause, then went on to the end
        log = (tmp_path / "study" / "logs" / f"{trial.number:04d}.log").read_text()
        assert "tfyard: launch paused where --pause_at_step asked; rerun to go on" in log, log
        assert "restarting the job" not in log, log
        assert [r["step"] for r in eval_records(trial.user_attrs["run_dir"])] == \
            list(range(10, 101, 10))
