"""A study where a run is expected: `tfyard predict` and `tfyard evaluate` given a `tfyard
tune` directory use its best trial's run, which tune.json names; `tfyard train` refuses one,
and `tfyard tune` refuses a run's directory (neither writes into the other kind).

The run is looked up inside the study as given (`trials/NNNN`), so a study copied elsewhere
or into a bucket still finds its best run; the directory tune.json recorded is the fallback
(a study whose storage several machines share: the best trial may have run on another).
"""

from __future__ import annotations

import json
import sys

from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.runfiles.files import files_for
from tfyard.runfiles.layout import RUN_FILE, RunDirectory, StudyDirectory


def run_named(path: str, flag: str = OUTPUT_FLAG) -> str:
    """The run `path` names: `path` itself, or for a study its best trial's run directory,
    which a line on stderr names; a study with no finished trial is a UserError."""
    study, files = StudyDirectory(path.rstrip("/")), files_for(path)
    text = files.read_from(study.summary, 0).decode("utf-8", errors="replace")
    if not text:
        return path
    try:
        summary = json.loads(text)
        best = summary["best_trial"]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{study.summary} is not a study summary; point {flag} at a run "
                        "directory or a study `tfyard tune` wrote") from None
    if not best:
        raise UserError(f"{path} is a study with no finished trial yet; wait for one, or give "
                        f"{flag} one of its trials' runs ({study.trials}/NNNN)")
    inside = study.trial(best["number"])
    run = inside if files.has(inside) or not best.get("run_dir") else best["run_dir"]
    figure = f" ({summary['metric']} {summary['best_value']:.4g})" \
        if summary.get("metric") and summary.get("best_value") is not None else ""
    print(f"tfyard: {path} is a study: its best trial {best['number']}{figure}, run {run}",
          file=sys.stderr)   # stdout is the command's own output (rows, figures)
    return run


def refuse_a_study(path: str) -> None:
    """`tfyard train` into a study's DIR would mix a run's files into the study's (its logs,
    checkpoints beside trials/): one line instead, before anything is written."""
    study, files = StudyDirectory(path.rstrip("/")), files_for(path)
    if files.has(study.summary) or files.has(study.database):
        raise UserError(f"{OUTPUT_FLAG} {path} holds a study `tfyard tune` wrote; give the run "
                        f"another {OUTPUT_FLAG} (a study's runs are its trials/NNNN)")


def refuse_a_run(path: str) -> None:
    """`tfyard tune` into a run's directory would put a study inside the run: one line
    instead, before anything is written."""
    run = RunDirectory(path.rstrip("/"))
    if run.files.has(run.run_file):
        raise UserError(f"{OUTPUT_FLAG} {path} holds a run `tfyard train` wrote ({RUN_FILE}); "
                        f"give the study another {OUTPUT_FLAG}")
