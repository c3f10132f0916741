"""`tfyard tune`'s own settings, declared once: its flags (`add_tune_arguments`),
`tfyard.tune`'s keywords, their checks (`TuneSettings` checks itself when built) and
tune.json's `settings` all come from these fields. Every other option of a tune command is a
`tfyard train` option that the trials share. No Optuna or TensorFlow import here, so
`tfyard tune --help` is fast."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from tfyard import platform
from tfyard.flags.declared import (
    Checked,
    add_field_arguments,
    nonnegative_float,
    nonnegative_int,
    opt,
    positive_float,
    positive_int,
)
from tfyard.tune.onray import PLACES

MODES = ("max", "min")
SAMPLERS = ("tpe", "random", "grid")
SCHEDULERS = ("none", "median", "asha", "pbt")
SEARCH = "the search"
RAY = ("on a Ray cluster (--on ray: each trial a `tfyard launch ray` of its train command, "
       "one Ray actor a member, its --workers in one placement group; the search and its "
       "storage stay here, so across machines DIR must be a shared file system)")


@dataclass(frozen=True)
class TuneSettings(Checked):
    """What a study searches and how: `tfyard tune`'s flags by their names."""

    space: object = opt(None, required=True, metavar="FILE", group=SEARCH, help=(
        "YAML or JSON mapping train option names to {loguniform: [lo, hi]}, {uniform: [lo, "
        "hi]}, {int: [lo, hi]}, {choice: [...]} or a plain value (fixed); in Python, the "
        "mapping itself"))
    metric: str | None = opt(None, required=True, group=SEARCH, help=(
        "the figure a trial is judged by: validation/top1, validation/loss, train/loss, ... "
        "(its last report)"))
    mode: str | None = opt(None, required=True, choices=MODES, group=SEARCH,
                           help="whether a higher or a lower --metric is better")
    trials: int | None = opt(None, required=True, check=positive_int, metavar="N",
                             group=SEARCH, help="finished and pruned trials the study holds "
                             "at the end (a rerun counts those it holds)")
    output_dir: str | None = opt(None, required=True, platform_flag=True)
    parallel: int = opt(1, check=positive_int, metavar="P", group=SEARCH, help=(
        "trials run at once, the CPU cores split between them, and the GPUs (each trial its "
        "own where there are enough, else round-robin) (default: {default})"))
    sampler: str = opt("tpe", choices=SAMPLERS, group=SEARCH, help=(
        "Optuna's TPE (default), random, or grid (every combination of choice entries)"))
    scheduler: str = opt("none", choices=SCHEDULERS, group=SEARCH, help=(
        "pruning at each evaluation: median (Optuna's MedianPruner), asha (successive "
        "halving), none (default: every trial runs to its end); or pbt: population-based "
        "training of --parallel trials, the worst quarter taking a best-quarter trial's "
        "checkpoint and perturbed values every --pbt_interval steps (only learning_rate, "
        "weight_decay, momentum and label_smoothing ranges may be searched)"))
    min_resource: float | None = opt(None, check=positive_float, metavar="R", group=SEARCH,
                                     help=(
        "median and asha: where pruning may start, a trial's first rung, in its budget's "
        "unit (epochs with --epochs, steps with --train_steps). Default: the first "
        "evaluation past a trial's first epoch and its learning-rate warm-up, where the "
        "figures can tell configurations apart (half the budget where it is shorter)"))
    pbt_interval: int | None = opt(None, check=positive_int, metavar="STEPS", group=SEARCH,
                                   help="--scheduler pbt: training steps between two "
                                   "exploit/explore rounds (each trial stops there: train's "
                                   "--pause_at_step)")
    storage: str | None = opt(None, metavar="URL", group=SEARCH, help=(
        "Optuna storage URL (default: sqlite:///DIR/study.db). Tunes given one URL and one "
        "--study_name share one study, each with its own --output_dir, and run --trials "
        "between them: SQLite on one machine, e.g. postgresql://USER:PASSWORD@HOST/DB "
        "across machines"))
    study_name: str | None = opt(None, group=SEARCH, help=(
        "the study's name in the storage (default: DIR's last component); the same in every "
        "tune sharing --storage"))
    seed: int | None = opt(None, check=int, group=SEARCH, help=(
        "seeds the sampler and every trial (train's --seed): a rerun after a kill draws "
        "what the unbroken study drew"))
    timeout: float | None = opt(None, check=positive_float, metavar="S", group=SEARCH,
                                help="start no trial after S seconds (running ones finish)")
    max_failures: int = opt(2, check=nonnegative_int, metavar="K", group=SEARCH, help=(
        "failed trials (a crash, divergence) this run of tune tolerates before it stops "
        "(default: {default})"))
    on: str = opt("local", choices=PLACES, group=RAY,
                  help="where the trials run (default: this machine)")
    address: str | None = opt(None, group=RAY, help=(
        "the Ray cluster HEAD:PORT to join (default: RAY_ADDRESS, a Ray started on this "
        "machine, or a local Ray started for the study)"))
    workers: int = opt(1, check=positive_int, metavar="N", group=RAY, help=(
        "members a trial trains on, all-reduce, placed as a gang (default: {default})"))
    cpus_per_member: float = opt(1.0, check=positive_float, metavar="C", group=RAY, help=(
        "CPUs each member reserves, and its TensorFlow op threads (default: {default}; a "
        "node's CPU count runs one trial a node)"))
    gpus_per_member: float = opt(0.0, check=nonnegative_float, metavar="G", group=RAY,
                                 help="GPUs each member reserves (default: {default})")

    @classmethod
    def names(cls) -> set[str]:
        return {f.name for f in fields(cls)}

    @classmethod
    def from_args(cls, args) -> TuneSettings:
        """The settings of parsed flags (absent ones take their declared default)."""
        return cls(**{name: value for name, value in vars(args).items()
                      if name in cls.names() and value is not None})

    def recorded(self) -> dict:
        """tune.json's `settings`: as given, the space's file or mapping shown as text."""
        from tfyard.tune.study import shown

        values = asdict(self)
        values["storage"] = shown(values["storage"]) if values["storage"] else None
        if not isinstance(values["space"], dict):
            values["space"] = str(values["space"])
        return values


def add_tune_arguments(parser):
    """`tfyard tune`'s own flags, from the declaration."""
    add_field_arguments(parser, TuneSettings)
    platform.add_platform_flag(
        parser, "output_dir", required=True, help="the study's directory: trials/, logs/, "
        "study.db, tune.json, trials.csv, tune.png. A bucket prefix (s3://, gs://) takes "
        "--storage; its trials are bucket runs, the trials' work dirs stay on the machine "
        "that runs each (with --on ray, its node), the summary and logs are uploaded")
    return parser
