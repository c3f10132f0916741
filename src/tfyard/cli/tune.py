"""`tfyard tune`: a hyperparameter search whose trials are ordinary `tfyard train` runs."""

from __future__ import annotations

from tfyard.tune.settings import TuneSettings, add_tune_arguments


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
    add_tune_arguments(tune)
    tune.set_defaults(func=_tune, train_argv=[])


def _tune(args) -> int:
    from tfyard.runfiles.layout import StudyDirectory
    from tfyard.tune.checked import search
    from tfyard.tune.search import run

    summary = run(search(TuneSettings.from_args(args), args.train_argv))
    best = summary["best_trial"]
    if best:
        print(f"tune: best trial {best['number']}: {summary['metric']} "
              f"{summary['best_value']:.4g} in {best['run_dir']}")
    print(f"tune: study {summary['study_name']} in {summary['storage']}; summary in "
          f"{StudyDirectory(args.output_dir).summary}")
    return 0


