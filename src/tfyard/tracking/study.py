"""The study in MLflow: one parent run for the study, one child run a trial (tag
`mlflow.parentRunId`), the best child tagged `tfyard.best`.

Tune creates each trial's child run and writes its id into the trial's run.json before the
trial starts (for a run in a bucket: in the bucket, which train's start on any node, a Ray
trial's too, copies down, and in this machine's copy), where `tfyard train` looks for the
MLflow run a restart continues: the trial's
own tracking (its params, metrics, files, model) then goes to that child, and a trial resumed
after a kill continues it. The parent's id is a study user attribute, so a rerun, or another
machine sharing the storage, continues the same parent. Only the start is strict (a server
that cannot be used stops tune in one line, unless --mlflow_optional); a request that fails
later is named in a warning and the study goes on.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from tfyard import tracking
from tfyard.runfiles.layout import StudyDirectory, trial_name
from tfyard.runfiles.record import amend_run
from tfyard.tracking.mlflow_run import Tracker, created, failure, log_params

log = logging.getLogger("tfyard")
PARENT = "mlflow_parent_run_id"   # the study's user attribute
CHILD = tracking.RUN_ID           # a trial's user attribute, as in its run.json
BEST = "tfyard.best"              # the tag of the best trial's child run
STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}


class StudyRuns:
    """The study's MLflow runs: the parent (a Tracker) and the trials' children."""

    def __init__(self, parent: Tracker, study):
        self.parent, self.mlflow = parent, parent.mlflow
        self.settings = dataclasses.replace(parent.settings, run_name=None)   # children's
        self._best = _best(study)

    @classmethod
    def start(cls, settings: tracking.Settings | None, study, output_dir: str, params: dict):
        """Continue the study's parent run or create it; None when tracking is off (or the
        server cannot be used and the user chose to go on untracked)."""
        if settings is None:
            return None
        name = settings.run_name or study.study_name
        parent = Tracker.start(settings, study.user_attrs.get(PARENT), name, params,
                               {"tfyard.study": study.study_name,
                                "tfyard.output_dir": output_dir}, [])
        if parent is None:
            return None
        if study.user_attrs.get(PARENT) != parent.run_id:
            study.set_user_attr(PARENT, parent.run_id)
        print(f"tune: {parent.where}", flush=True)
        return cls(parent, study)

    def child(self, trial, run_dir: str, params: dict, copy: str) -> None:
        """The trial's child run (created at its first start), named in its run.json in
        `copy`, where train reads it: `run_dir` itself, or a bucket run's local copy (which
        train makes one with the bucket before it starts)."""
        self._quietly("did not take a trial's run", self._child, trial, run_dir, params, copy)

    def _child(self, trial, run_dir: str, params: dict, copy: str) -> None:
        run_id = trial.user_attrs.get(CHILD)
        if run_id is None:
            run = created(self.mlflow, self.settings, f"{trial.study.study_name}-"
                          f"{trial_name(trial.number)}", {"mlflow.parentRunId": self.parent.run_id,
                                                  "tfyard.output_dir": run_dir,
                                                  "tfyard.trial": str(trial.number)})
            run_id = run.info.run_id
            log_params(self.mlflow, run_id, params)
            trial.set_user_attr(CHILD, run_id)
        amend_run(copy, lambda record: _named(record, run_id),
                  run_dir if copy != run_dir else None)   # a bucket run: amended there too

    def ended(self, study, number: int, metric: str) -> None:
        """After trial `number` ended: its child's status, the best child's tag, and the
        parent's best value (a step a finished or pruned trial)."""
        trial = study.get_trials(deepcopy=False)[number]
        self._quietly("did not take a trial's end", self._ended, study, trial, metric)

    def _ended(self, study, trial, metric: str) -> None:
        run_id = trial.user_attrs.get(CHILD)
        if run_id and trial.state.name in STATUS:
            self.mlflow.set_tag(run_id, "tfyard.state", trial.state.name.lower())
            self.mlflow.set_terminated(run_id, STATUS[trial.state.name])
        best = _best(study)
        if best is None:
            return
        if best != self._best:
            if self._best:
                self.mlflow.delete_tag(self._best, BEST)
            self.mlflow.set_tag(best, BEST, "true")
            self._best = best
        done = sum(t.state.name in ("COMPLETE", "PRUNED") for t in study.get_trials(
            deepcopy=False))
        self.parent.log({"kind": "best", "step": done, "time": time.time(),
                         metric: study.best_value})
        self.mlflow.set_tag(self.parent.run_id, "tfyard.best_trial",
                            str(study.best_trial.number))

    def close(self, output_dir: str, status: str) -> None:
        """The study's tune.json, trials.csv and tune.png as the parent's files, then the
        parent ended as `status`."""
        directory = StudyDirectory(output_dir)
        self.parent.log_outputs([directory.summary, directory.table, directory.plot], None)
        self.parent.close(status)

    def _quietly(self, doing: str, call, *args) -> None:
        try:
            call(*args)
        except Exception as exc:  # noqa: BLE001 - MLflow and its HTTP client raise many kinds
            log.warning(f"tfyard: warning: {failure(self.settings, exc, doing)}; the study "
                        "goes on (its record is in the storage and tune.json)")


def _named(record: dict | None, run_id: str) -> dict | None:
    """The run.json `record` (None: none yet) naming the MLflow run `run_id`; None when it
    names one already."""
    return None if CHILD in (record or {}) else {**(record or {}), CHILD: run_id}


def _best(study) -> str | None:
    """The child run of the study's best trial, if any trial finished."""
    if not any(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False)):
        return None
    return study.best_trial.user_attrs.get(CHILD)
