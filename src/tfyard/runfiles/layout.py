"""The names of a run's files, spelled here and nowhere else: what `output_dir` holds, what a
member leaves in `work_dir`, and what the export holds. `RunDirectory` and `WorkDirectory`
give their paths and (`files`) the file operations for the store the path is on.

It sits low (below `platform`, `distribute` and `predict`), so every reader of a run, the
side-car servers and `predict` included, finds its files by these names.
"""

from __future__ import annotations

import os
import re

from tfyard.runfiles.files import files_for

RUN_FILE = "run.json"
SUMMARY = "summary.json"
METRICS = "metrics"                  # the chief's reports: metrics.jsonl
REPORTS = ".jsonl"
CHECKPOINTS = "checkpoints"
POINTER = "checkpoint"               # TensorFlow's state file in checkpoints/: the latest ones
CHECKPOINT_SETTINGS = ".meta.json"   # beside each checkpoint: the settings of its step
# Save N in checkpoints/ is ckpt-N: TensorFlow's ckpt-N.index (written last) and
# ckpt-N.data-*, while it is written ckpt-N_temp/. The prefix is given to its manager.
CHECKPOINT_PREFIX, INDEX, DATA, UNFINISHED = "ckpt", ".index", ".data-", "_temp"
EXPORT = "export"
SAVED_MODEL = "saved_model"
KERAS_MODEL, H5_MODEL = "model.keras", "model.h5"
CLASS_NAMES = "class_names.txt"      # beside model.keras: one class name a line, by class id
EXPORTED_MODEL = os.path.join(EXPORT, KERAS_MODEL)
CURVES = "curves.png"
SCHEDULE = "pbt.json"                # a tune PBT trial's values and donors, interval by interval
LEASE = ".tfyard-lease"
LOGS, WORK = "logs", "work"          # the default log_dir and work_dir, inside output_dir
EVENTS = "events.out.tfevents."      # TensorBoard's: one file per writer, under logs/
PUBLISHING = ".tfyard-publishing"    # a bucket run's copy: saves waiting for upload
SET_ASIDE = ".set-aside-"            # COPY.set-aside-STAMP: a copy of another lineage, kept
MEMBERS, EXAMPLE_IDS = "members", "example_ids"   # in work_dir, one file a member
# A `tfyard tune` study's directory: its runs in trials/NNNN, and beside them
TRIALS = "trials"
STUDY_SUMMARY, TRIALS_TABLE, STUDY_PLOT = "tune.json", "trials.csv", "tune.png"
STUDY_DATABASE = "study.db"          # the default storage: Optuna's SQLite

# What unfinished writes leave besides `tfyard.replace`'s staging (which `recover_all` puts
# right): a checkpoint save's directory.
TEMPORARIES = (os.path.join(CHECKPOINTS, f"{CHECKPOINT_PREFIX}-*{UNFINISHED}*"),)


def checkpoint_name(step: int | str) -> str:
    """`ckpt-N`, the name of save `step` in checkpoints/ (a glob's with `*`)."""
    return f"{CHECKPOINT_PREFIX}-{step}"


def checkpoint_step(path: str) -> int | None:
    """N of `.../ckpt-N` or `.../ckpt-N.index`; None for any other name."""
    found = re.search(rf"{CHECKPOINT_PREFIX}-(\d+)(?:{re.escape(INDEX)})?$", path)
    return int(found.group(1)) if found else None


def trial_name(number: int) -> str:
    """`NNNN`: the trial numbering of a study's folders (trials/, logs/, work/), and of its
    MLflow runs."""
    return f"{number:04d}"


def appended(name: str) -> str | None:
    """How the run file `name` (relative to `output_dir`) grows, if it only ever grows:
    "reports" for a `NAME.jsonl` (one record a line), "events" for TensorBoard's events
    file; None for a file written whole."""
    base = name.rsplit("/", 1)[-1]
    if base.endswith(REPORTS):
        return "reports"
    return "events" if base.startswith(EVENTS) else None


def _file(*names: str) -> property:
    return property(lambda place: place.path(*names), doc=f"`{'/'.join(names)}` here")


class RunDirectory:
    """One run's `output_dir`: where each of its files lives, and (`files`) the operations
    on them for the store it is on."""

    def __init__(self, root: str):
        self.root = root
        self.files = files_for(root)

    def path(self, *names: str) -> str:
        return os.path.join(self.root, *names)

    def reports(self, name: str = METRICS) -> str:
        """`NAME.jsonl`: the chief's reports (metrics.jsonl), or a side-car's."""
        return self.path(name + REPORTS)

    run_file, summary, metrics = _file(RUN_FILE), _file(SUMMARY), _file(METRICS + REPORTS)
    checkpoints, pointer = _file(CHECKPOINTS), _file(CHECKPOINTS, POINTER)
    export, exported_model = _file(EXPORT), _file(EXPORTED_MODEL)
    saved_model = _file(EXPORT, SAVED_MODEL)
    curves, lease, publishing, logs = _file(CURVES), _file(LEASE), _file(PUBLISHING), _file(LOGS)
    schedule = _file(SCHEDULE)


class StudyDirectory:
    """A study's `output_dir`: its summary, table, plot and database beside its trials' run
    directories. Only names: a study copied into a bucket is read by URL (`runfiles.study`)."""

    def __init__(self, root: str):
        self.root = root

    def path(self, *names: str) -> str:
        return os.path.join(self.root, *names)

    def trial(self, number: int) -> str:
        """Trial `number`'s run directory, `trials/NNNN`."""
        return self.path(TRIALS, trial_name(number))

    def trial_log(self, number: int) -> str:
        """Trial `number`'s output, `logs/NNNN.log`."""
        return self.path(LOGS, trial_name(number) + ".log")

    def trial_work(self, number: int) -> str:
        """Trial `number`'s work dir, `work/NNNN`."""
        return self.path(WORK, trial_name(number))

    summary, table, plot = _file(STUDY_SUMMARY), _file(TRIALS_TABLE), _file(STUDY_PLOT)
    database, trials, logs = _file(STUDY_DATABASE), _file(TRIALS), _file(LOGS)
    work = _file(WORK)


def checkpoint_settings(checkpoint_path: str) -> str:
    """`ckpt-N.meta.json`, beside the checkpoint `checkpoint_path` (`.../ckpt-N`)."""
    return checkpoint_path + CHECKPOINT_SETTINGS


class WorkDirectory:
    """What one run's members leave in `work_dir`, one file each."""

    def __init__(self, root: str):
        self.root = root
        self.files = files_for(root)

    members, example_ids = _file(MEMBERS), _file(EXAMPLE_IDS)

    def path(self, *names: str) -> str:
        return os.path.join(self.root, *names)

    def member_summary(self, member: str) -> str:
        return self.path(MEMBERS, f"{member}.json")

    def member_example_ids(self, member: str) -> str:
        return self.path(EXAMPLE_IDS, member + REPORTS)
