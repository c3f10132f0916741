"""The study's record in Optuna's storage, and its summary beside the trials: `tune.json`
(the best trial, the storage with its password redacted) and `trials.csv` (one row a trial).

Samplers and pruners are Optuna's, chosen by name; nothing here samples or prunes.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass

from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.replace import replacing_file
from tfyard.runfiles.files import LocalFiles, files_for
from tfyard.runfiles.layout import StudyDirectory
from tfyard.tracking import redacted, scrubbed

# Tunes started at once on a new database race to create Optuna's tables: the loser's
# "table ... already exists", or its duplicate stamp of the schema's version, is retried,
# when the tables are there to open.
CREATE_TRIES = 5
RACES = ("already exists", "UNIQUE constraint failed: alembic_version")
# A trial's user attribute: asked by one of two tunes sharing the storage at the same moment,
# one too many, told failed and never run (`search._ask`); counted as its own state here.
SURPLUS = "tfyard.surplus"
# A study's user attribute: what it searches (`search.Search.identity`), set at its creation.
IDENTITY = "tfyard.identity"
# A PBT trial's user attribute: its values and donors, interval by interval.
SCHEDULE = "pbt_schedule"   # [{"step", "donor", "params"}]
# How a command gives each part of the identity.
IDENTITY_FLAGS = {"metric": "--metric", "direction": "--mode", "space": "--space",
                  "sampler": "--sampler", "scheduler": "--scheduler",
                  "min_resource": "--min_resource", "seed": "--seed"}
# The figures a run reports (metrics.jsonl): a metric is KIND/NAME, KIND a report's source.
METRICS = {"validation": ("eval", ("loss", "top1", "top5")),
           "train": ("train", ("loss", "top1", "top5"))}


@dataclass(frozen=True)
class Metric:
    """`validation/top1`: the `top1` of metrics.jsonl's `eval` reports."""

    name: str
    kind: str     # the report kind in metrics.jsonl
    key: str

    def value(self, record: dict) -> float | None:
        """This metric's figure in one metrics.jsonl record, if it is one of its reports."""
        return record.get(self.key) if record.get("kind") == self.kind else None


def metric(name: str) -> Metric:
    source, _, key = name.partition("/")
    kind, keys = METRICS.get(source, (None, ()))
    if key not in keys:
        known = ", ".join(f"{s}/{k}" for s, (_, ks) in METRICS.items() for k in ks)
        raise UserError(f"--metric {name}: not a figure trials report; choose one of {known}")
    return Metric(name, kind, key)


def import_optuna():
    """Optuna, with its per-trial log lines off (tune prints its own)."""
    try:
        import optuna
    except ImportError:
        raise UserError("tfyard tune needs Optuna: pip install 'tfyard[optuna]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def shown(url: str) -> str:
    """`url` with its password and query values as *** (a SQLite path kept as written)."""
    return redacted(url) if "@" in url or "?" in url else url


def default_storage(output_dir: str) -> str:
    return f"sqlite:///{os.path.abspath(StudyDirectory(output_dir).database)}"


def open_storage(url: str):
    """Optuna's storage at `url`, opened now: a wrong URL, driver or server is one line,
    its password shown as ***. A plain `postgresql://` URL goes through psycopg (3), the
    driver the `optuna` extra installs, whichever SQLAlchemy would pick by default."""
    optuna = import_optuna()
    driven = "postgresql+psycopg://" + url[len("postgresql://"):] \
        if url.startswith("postgresql://") else url
    for attempt in range(CREATE_TRIES):
        try:
            return optuna.storages.RDBStorage(driven)
        except Exception as exc:  # SQLAlchemy's and the drivers' errors have no common base
            if any(race in str(exc) for race in RACES) and attempt + 1 < CREATE_TRIES:
                time.sleep(0.2)   # another tune created the tables meanwhile: open them
                continue
            _refuse(url, exc)


def _refuse(url: str, exc: Exception):
    reason = scrubbed(str(exc).strip().splitlines()[0] if str(exc).strip() else
                      type(exc).__name__, url)
    raise UserError(f"--storage {shown(url)}: cannot open it ({reason}); give a "
                    "database URL Optuna takes, e.g. sqlite:///study.db or "
                    "postgresql://USER:PASSWORD@HOST/DB") from None


def reopened(study, storage, number: int):
    """Trial `number` of `study` as an `optuna.trial.Trial` again, to report to, tell or
    annotate (a trial a killed tune left running, a PBT recipient): Optuna keeps a frozen
    trial's id private, so the id comes from the `storage` object's public API."""
    trial_id = storage.get_trial_id_from_study_id_trial_number(
        storage.get_study_id_from_name(study.study_name), number)
    return import_optuna().trial.Trial(study, trial_id)


def refuse_another_identity(storage: str, database: str | None, name: str,
                            identity: dict) -> None:
    """Refuse in one line a command that disagrees with the study `name` it would continue
    on what the study searches, before it writes anything. `database`: the default SQLite
    file, not opened (nor made) where it does not exist. A study of an earlier tfyard has
    no identity recorded; Optuna's own direction is checked, and the command records it."""
    if database is not None and not LocalFiles().has(database):
        return
    optuna = import_optuna()
    try:
        study = optuna.load_study(study_name=name, storage=open_storage(storage))
    except KeyError:   # no such study yet: this command creates it
        return
    recorded = study.user_attrs.get(IDENTITY) or {
        "direction": study.direction.name.lower()}
    for key, value in recorded.items():
        if identity.get(key) != value:
            raise UserError(f"study {name!r} in {shown(storage)} searches with "
                            f"{_given(key, value)}, and this command gives "
                            f"{_given(key, identity.get(key))}; rerun with the study's "
                            f"settings, or give another {OUTPUT_FLAG} for another study "
                            "(with a shared --storage, a --study_name of its own too)")


def refuse_a_second_study(place, storage: str, database: str | None, name: str) -> None:
    """One DIR holds one study: its trials' folders are numbered by trial alone, so a second
    study there (another --study_name, or a study's folder copied and so named anew) would
    take the first one's finished runs for its own trials. Refused in one line before
    anything is written; the study DIR holds is named by its tune.json, else by its own
    database (`database`, not opened where it does not exist)."""
    held = _study_held(place, storage, database, name)
    if held is not None and held != name:
        raise UserError(f"{OUTPUT_FLAG} {place.runs.root} holds study {held!r}, not {name!r}; "
                        f"continue it with --study_name {held}, or give another "
                        f"{OUTPUT_FLAG} for another study")


def _study_held(place, storage: str, database: str | None, name: str) -> str | None:
    files = files_for(place.runs.summary)
    try:
        return json.loads(files.read_whole(place.runs.summary)).get("study_name")
    except (FileNotFoundError, ValueError, AttributeError):
        pass
    if database is None or not LocalFiles().has(database):
        return None
    names = import_optuna().study.get_all_study_names(open_storage(storage))
    return name if name in names or not names else names[0]


def _given(key: str, value) -> str:
    """A part of a study's identity as a command gives it: `--mode max`, `--epochs 4`."""
    if key == "direction":
        return f"--mode {str(value)[:3]}"
    if key == "train":
        flags = json.loads(value or "{}")
        return " ".join(f"--{flag} {flags[flag]}" for flag in sorted(flags)) or \
            "no shared train flags"
    return f"{IDENTITY_FLAGS[key]} {value}" if value is not None else f"no {IDENTITY_FLAGS[key]}"


def derived_seed(seed: int | None, *names) -> int | None:
    """The seed of one draw of a seeded study: a function of the study's seed and what
    names the draw (the worker and the trial's number; a PBT round's step), never of a
    process-long stream, so a study killed and run again draws exactly what it drew."""
    if seed is None:
        return None
    return int.from_bytes(hashlib.sha256(repr((seed, *names)).encode()).digest()[:4], "big")


def sampler(name: str, seed: int | None, grid: dict | None):
    """TPE (the default), random, or the grid of `grid` (name -> choices)."""
    samplers = import_optuna().samplers
    if name == "grid":
        class Grid(samplers.GridSampler):
            """Optuna's grid without its `study.stop()` once every point is taken, which
            works only inside `Study.optimize`: tune caps --trials at the grid's size."""

            def after_trial(self, *_args) -> None:
                pass

        return Grid(grid, seed=seed)
    if name == "random":
        return samplers.RandomSampler(seed=seed)
    return samplers.TPESampler(seed=seed)


def write_summary(study, place, storage: str, metric_name: str, settings: dict,
                  plot: bool = True) -> dict:
    """tune.json, trials.csv and (with `plot`) tune.png as the study stands now, in the
    study's `place` (a `runfiles.place.StudyPlace`: written in its home, uploaded when it is a
    bucket); returns tune.json's content, `settings` (tune's own, `TuneSettings.recorded`)
    among it."""
    from tfyard.tune.plot import plot_study

    states = import_optuna().trial.TrialState
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state == states.COMPLETE]
    sign = -1 if study.direction.name == "MAXIMIZE" else 1
    best = min(done, key=lambda t: (sign * t.value, t.number)) if done else None
    summary = {
        "study_name": study.study_name, "storage": shown(storage), "metric": metric_name,
        "direction": study.direction.name.lower(), "identity": study.user_attrs.get(IDENTITY),
        "ties": "the earlier trial is the best",
        "best_trial": {"number": best.number, "run_dir": best.user_attrs.get("run_dir")}
        if best else None,
        "best_params": values_now(best) if best else None,   # PBT's: those in force at its end
        "best_value": best.value if best else None,
        "trials": {state: sum(_state(t) == state for t in trials)
                   for state in [s.name.lower() for s in states] + ["surplus"]},
        "settings": settings,
    }
    directory = place.home
    with replacing_file(directory.summary) as stream:
        json.dump(summary, stream, indent=2)
        stream.write("\n")
    names = sorted({name for t in trials for name in t.params})
    with replacing_file(directory.table) as stream:
        table = csv.writer(stream)
        table.writerow(["number", "state", "value", *names, "run_dir", "started", "ended"])
        for t in trials:
            value = "" if t.value is None or not math.isfinite(t.value) else t.value
            table.writerow([t.number, _state(t), value,
                            *(t.params.get(name, "") for name in names),
                            t.user_attrs.get("run_dir", ""), _time(t.datetime_start),
                            _time(t.datetime_complete)])
    drawn = ()
    if plot:
        plot_study(trials, directory.plot, metric_name, study.direction.name == "MAXIMIZE")
        drawn = (directory.plot,)
    place.publish(directory.summary, directory.table, *drawn)
    return summary


def values_now(trial) -> dict:
    """A trial's values now: a PBT trial's schedule's last, else the sampler's."""
    schedule = trial.user_attrs.get(SCHEDULE) or []
    return schedule[-1]["params"] if schedule else dict(trial.params)


def _state(trial) -> str:
    """Optuna's state of `trial`, in lower case; `surplus` for a trial never run."""
    return "surplus" if trial.user_attrs.get(SURPLUS) else trial.state.name.lower()


def _time(moment) -> str:
    return moment.isoformat(timespec="seconds") if moment else ""
