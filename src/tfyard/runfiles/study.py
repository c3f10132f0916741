"""A study where a run is expected: `tfyard predict` and `tfyard evaluate` given a `tfyard
tune` directory use its best trial's run, which tune.json names.

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
from tfyard.runfiles.layout import StudyDirectory


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
