"""`tfyard tune`: a hyperparameter search whose trials are ordinary `tfyard train` runs."""

from __future__ import annotations

from tfyard import platform
from tfyard.flags.declared import (
    flag_type,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
)
from tfyard.train.options import add_option_arguments
from tfyard.tune import onray
from tfyard.tune.checked import MODES
from tfyard.tune.study import SAMPLERS, SCHEDULERS


def register(commands) -> None:
    tune = commands.add_parser(
        "tune", allow_abbrev=False, usage="tfyard tune --space FILE --metric NAME --mode "
        "{max,min} --trials N --output_dir DIR [options] [TRAIN OPTIONS]",
        help="search hyperparameters: many `tfyard train` runs, sampled and pruned by Optuna",
        description="Search the options of `tfyard train` (the `optuna` extra). Each trial is "
        "an ordinary run in DIR/trials/NNNN that evaluates ten times over its --epochs; "
        "Optuna's sampler picks its options from --space and its pruner stops a poor one at "
        "a checkpoint. The "
        "study lives in Optuna's storage (DIR/study.db by default); DIR/tune.json names the "
        "best trial, DIR/trials.csv lists them all, DIR/tune.png draws them; `tfyard "
        "predict` and `tfyard evaluate` given DIR use the best trial's run. With MLflow on "
        "(--mlflow_uri or MLFLOW_TRACKING_URI) the study is one parent run and each trial a "
        "child run. The same command again continues the study; `tfyard.tune(...)` is its "
        "Python form. Any other option is a "
        "`tfyard train` option every trial shares.")
    tune.add_argument("--space", required=True, metavar="FILE",
                      help="YAML or JSON mapping train option names to {loguniform: [lo, hi]}, "
                      "{uniform: [lo, hi]}, {int: [lo, hi]}, {choice: [...]} or a plain value "
                      "(fixed)")
    tune.add_argument("--metric", required=True, help="the figure a trial is judged by: "
                      "validation/top1, validation/loss, train/loss, ... (its last report)")
    tune.add_argument("--mode", required=True, choices=MODES,
                      help="whether a higher or a lower --metric is better")
    tune.add_argument("--trials", required=True, type=flag_type(positive_int), metavar="N",
                      help="finished and pruned trials the study holds at the end (a rerun "
                      "counts those it holds)")
    tune.add_argument("--parallel", type=flag_type(positive_int), default=1, metavar="P",
                      help="trials run at once, the CPU cores split between them (default: 1)")
    tune.add_argument("--sampler", choices=SAMPLERS, default="tpe", help="Optuna's TPE "
                      "(default), random, or grid (every combination of choice entries)")
    tune.add_argument("--scheduler", choices=SCHEDULERS, default="none", help="pruning at "
                      "each evaluation: median (Optuna's MedianPruner), asha (successive "
                      "halving), none (default: every trial runs to its end); or pbt: "
                      "population-based training of --parallel trials, the worst quarter "
                      "taking a best-quarter trial's checkpoint and perturbed values every "
                      "--pbt_interval steps (only learning_rate, weight_decay, momentum and "
                      "label_smoothing ranges may be searched)")
    tune.add_argument("--pbt_interval", type=flag_type(positive_int), metavar="STEPS",
                      help="--scheduler pbt: training steps between two exploit/explore "
                      "rounds (each trial stops there: train's --pause_at_step)")
    tune.add_argument("--storage", metavar="URL", help="Optuna storage URL (default: "
                      "sqlite:///DIR/study.db). Tunes given one URL and one --study_name share "
                      "one study, each with its own --output_dir, and run --trials between "
                      "them: SQLite on one machine, e.g. postgresql://USER:PASSWORD@HOST/DB "
                      "across machines")
    tune.add_argument("--study_name", help="the study's name in the storage (default: DIR's "
                      "last component); the same in every tune sharing --storage")
    add_option_arguments(tune, ["seed"], grouped=False, helps={
        "seed": "seeds the sampler and every trial (train's --seed)"})
    tune.add_argument("--timeout", type=flag_type(positive_float), metavar="S",
                      help="start no trial after S seconds (running ones finish)")
    tune.add_argument("--max_failures", type=flag_type(nonnegative_int), default=2,
                      metavar="K", help="failed trials (a crash, divergence) this run of tune "
                      "tolerates before it stops (default: 2)")
    ray = tune.add_argument_group(
        "on a Ray cluster", "--on ray: each trial is a `tfyard launch ray` of its train "
        "command, one Ray actor a member (--workers of them in one placement group), joining "
        "the cluster at --address, else RAY_ADDRESS, a Ray started on this machine, or a local "
        "Ray started for the study. The search itself, and the study's storage, stay here; "
        "the workers write DIR/trials/NNNN, so across machines DIR must be a shared file "
        "system")
    ray.add_argument("--on", choices=onray.PLACES, default="local",
                     help="where the trials run (default: this machine)")
    ray.add_argument("--address", help="the Ray cluster HEAD:PORT to join")
    ray.add_argument("--workers", type=flag_type(positive_int), default=1, metavar="N",
                     help="members a trial trains on, all-reduce, placed as a gang "
                     "(default: 1)")
    ray.add_argument("--cpus_per_member", type=flag_type(positive_float), default=1.0,
                     metavar="C", help="CPUs each member reserves, and its TensorFlow op "
                     "threads (default: 1; a node's CPU count runs one trial a node)")
    ray.add_argument("--gpus_per_member", type=flag_type(nonnegative_float), default=0.0,
                     metavar="G", help="GPUs each member reserves (default: 0)")
    platform.add_platform_flag(tune, "output_dir", required=True, help="the study's "
                               "directory: trials/, logs/, study.db, tune.json, trials.csv, "
                               "tune.png. A bucket prefix (s3://, gs://) takes --storage; its "
                               "trials are bucket runs, the trials' work dirs stay on the "
                               "machine that runs each (with --on ray, its node), the "
                               "summary and logs are uploaded")
    tune.set_defaults(func=_tune, train_argv=[])


def _tune(args) -> int:
    from tfyard.runfiles.layout import StudyDirectory
    from tfyard.tune import tune
    from tfyard.tune.checked import SETTINGS

    summary = tune(**{name: getattr(args, name) for name in SETTINGS},
                   train_argv=args.train_argv)
    best = summary["best_trial"]
    if best:
        print(f"tune: best trial {best['number']}: {summary['metric']} "
              f"{summary['best_value']:.4g} in {best['run_dir']}")
    print(f"tune: study {summary['study_name']} in {summary['storage']}; summary in "
          f"{StudyDirectory(args.output_dir).summary}")
    return 0


