"""A run directory's twin in MLflow (`tfyard.tracking`): the chief's Tracker, started from
what the directory holds (run.json's MLflow run id, metrics.jsonl's reports) and its id
written back into run.json, so a restart, a new node or `tfyard track` continue one run."""

from __future__ import annotations

import contextlib
import json
import os
import time

from tfyard import tracking
from tfyard.errors import UserError
from tfyard.runfiles.layout import RunDirectory, checkpoint_step
from tfyard.runfiles.record import amend_run
from tfyard.train.rundir import lease as leases
from tfyard.train.rundir.directory import read_json_lines, read_run
from tfyard.train.rundir.lease_places import read as read_lease


def start(settings: tracking.Settings, output_dir: str, label: str, reopen: bool = True):
    """The Tracker of the run in `output_dir` (its run.json written already), or None when
    the user chose to train untracked past a server that cannot be used. `label` names the
    run where the user sees it (its URL for a run in a bucket); its params are run.json's
    alone, so a live run and `tfyard track` log the same; `reopen`: mark the MLflow run
    running."""
    from tfyard.tracking.mlflow_run import Tracker

    run = RunDirectory(output_dir)
    record = read_run(run.root) or {}
    history = read_json_lines(run.metrics) if run.files.has(run.metrics) else []
    name = os.path.basename(label.rstrip("/")) or label
    tracker = Tracker.start(settings, record.get(tracking.RUN_ID), name,
                            params(record), {"tfyard.output_dir": label}, history,
                            reopen)
    if tracker is not None and tracker.run_id != record.get(tracking.RUN_ID):
        amend_run(output_dir, lambda now: {**(now or {}), tracking.RUN_ID: tracker.run_id})
    return tracker


def params(record: dict) -> dict[str, str]:
    """run.json as MLflow parameters: strings, lists comma-joined, mappings as JSON; empty
    values and the MLflow run's own id left out."""
    values = {}
    for key, value in record.items():
        if value is None or value == [] or key == tracking.RUN_ID:
            continue
        if isinstance(value, list | tuple):
            value = ",".join(str(item) for item in value)
        elif isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)
        values[key] = str(value)
    return values


def outputs(tracker, output_dir: str) -> None:
    """run.json, summary.json and curves.png (drawn now if the run has none) as the MLflow
    run's files, and the export (if the run made one) as its model."""
    run = RunDirectory(output_dir)
    if not run.files.has(run.curves):
        from tfyard.train.rundir.plot import plot_run

        with contextlib.suppress(UserError):   # no training report: nothing to draw
            plot_run(output_dir)
    tracker.log_outputs([run.run_file, run.summary, run.curves],
                        run.export if run.files.is_directory(run.export) else None)


def backfill(settings: tracking.Settings, output_dir: str, label: str) -> str:
    """Log the run in `output_dir` (`label`: as the user named it) into MLflow after the
    fact: run.json's parameters, every report of metrics.jsonl, the run's files and its
    export as a model. A run tracked before continues its MLflow run with only what it
    lacks, so a second `tfyard track` sends nothing twice. Returns the line to print."""
    run = RunDirectory(output_dir)
    holder = read_lease(run.lease)
    if holder is not None and leases.stale_reason(holder, leases.claimant()) is None:
        raise UserError(f"{label} is being trained (host {holder.get('host', '?')}, pid "
                        f"{holder.get('pid', '?')}); track it once that run ends, or train "
                        "it with --mlflow_uri")
    tracker = start(settings, output_dir, label)
    outputs(tracker, output_dir)
    unsent = tracker.close("FINISHED" if run.files.has(run.summary) else "KILLED")
    if unsent:
        raise UserError(f"MLflow at {settings.shown} did not take {unsent} metrics; run "
                        "`tfyard track` again when it answers (what it took is kept)")
    return (f"tracked {label} as MLflow run {tracker.run_id} at {settings.shown}"
            + (f", its model registered as {settings.register_model}"
               if settings.register_model else ""))


def log_evaluation(settings: tracking.Settings, output_dir: str, label: str,
                   result: dict) -> None:
    """`tfyard evaluate`'s figures (`result`) into the run's MLflow run, as
    evaluate_SPLIT_NAME at the step of the checkpoint evaluated (the export's: the run's
    last); an evaluation of a step logged before is not logged again."""
    run = RunDirectory(output_dir)
    found = checkpoint_step(result["source"])
    summary = read_json_lines(run.summary) if run.files.has(run.summary) else []
    step = found if found is not None else (summary or [{}])[-1].get("final_step", 0)
    tracker = start(settings, output_dir, label, reopen=False)
    tracker.log({"kind": f"evaluate_{result['split']}", "step": step, "time": time.time(),
                 **{k: v for k, v in result.items() if isinstance(v, int | float)}})
    tracker.close(status=None)   # the run's status is its training's
