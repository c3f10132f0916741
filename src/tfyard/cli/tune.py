"""`tfyard tune`: a hyperparameter search whose trials are ordinary `tfyard train` runs."""

from __future__ import annotations

import os

from tfyard import platform
from tfyard.errors import UserError
from tfyard.flags import Parser
from tfyard.flags.declared import flag_type, nonnegative_int, positive_float, positive_int
from tfyard.train.options import add_option_arguments, add_train_arguments, options_from_args
from tfyard.tune.study import SAMPLERS, SCHEDULERS

EVALUATIONS = 10   # a trial's evaluations, the pruner's rungs


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
        "child run. The same command again continues the study. Any other option is a "
        "`tfyard train` option every trial shares.")
    tune.add_argument("--space", required=True, metavar="FILE",
                      help="YAML or JSON mapping train option names to {loguniform: [lo, hi]}, "
                      "{uniform: [lo, hi]}, {int: [lo, hi]}, {choice: [...]} or a plain value "
                      "(fixed)")
    tune.add_argument("--metric", required=True, help="the figure a trial is judged by: "
                      "validation/top1, validation/loss, train/loss, ... (its last report)")
    tune.add_argument("--mode", required=True, choices=("max", "min"),
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
    tune.add_argument("--storage", metavar="URL", help="Optuna storage URL, e.g. "
                      "postgresql://USER:PASSWORD@HOST/DB for a study several machines share "
                      "(default: sqlite:///DIR/study.db)")
    tune.add_argument("--study_name", help="the study's name in the storage (default: DIR's "
                      "last component)")
    add_option_arguments(tune, ["seed"], grouped=False, helps={
        "seed": "seeds the sampler and every trial (train's --seed)"})
    tune.add_argument("--timeout", type=flag_type(positive_float), metavar="S",
                      help="start no trial after S seconds (running ones finish)")
    tune.add_argument("--max_failures", type=flag_type(nonnegative_int), default=2,
                      metavar="K", help="failed trials (a crash, divergence) this run of tune "
                      "tolerates before it stops (default: 2)")
    platform.add_platform_flag(tune, "output_dir", required=True, help="the study's "
                               "directory: trials/, logs/, study.db, tune.json, trials.csv, "
                               "tune.png")
    tune.set_defaults(func=_tune, train_argv=[])


def _tune(args) -> int:
    from tfyard.runfiles.layout import StudyDirectory
    from tfyard.tune.search import run

    summary = run(search(args))
    best = summary["best_trial"]
    if best:
        print(f"tune: best trial {best['number']}: {summary['metric']} "
              f"{summary['best_value']:.4g} in {best['run_dir']}")
    print(f"tune: study {summary['study_name']} in {summary['storage']}; summary in "
          f"{StudyDirectory(args.output_dir).summary}")
    return 0


def search(args, command: tuple[str, ...] | None = None):
    """The checked search of a `tfyard tune` command line: every refusal here, one line,
    before any trial. `command` replaces `tfyard train` (tests' stand-in trials)."""
    from tfyard import tracking
    from tfyard.runfiles.files import LocalFiles
    from tfyard.storage import in_bucket
    from tfyard.tune import study as studies
    from tfyard.tune.search import TRAIN, Search
    from tfyard.tune.space import option_argv, read_space

    metric = studies.metric(args.metric)
    if in_bucket(args.output_dir, "--output_dir"):
        raise UserError("--output_dir in a bucket needs --storage URL (a database the study "
                        "can share; SQLite cannot live in a bucket)" if not args.storage else
                        "--output_dir in a bucket: not supported by tune yet; give a local "
                        "directory")
    shared, given = _train_options(args.train_argv)
    space = read_space(args.space)
    both = sorted(given & {p.name for p in space})
    if both:
        raise UserError(f"{', '.join(both)}: both in --space and on the command line; keep one")
    searched = {p.name for p in space if p.kind}
    if args.sampler == "grid" and any(p.kind not in (None, "choice") for p in space):
        wrong = next(p for p in space if p.kind not in (None, "choice"))
        raise UserError(f"--sampler grid takes choice entries only; {wrong.name} is "
                        f"{wrong.kind}: give it as {{choice: [...]}} or pick tpe or random")
    _check_pbt(args, space)
    fixed = {p.name: p.values[0] for p in space if not p.kind}
    evaluations, epochs = _cadence(shared, fixed, searched, given)
    storage = args.storage or studies.default_storage(args.output_dir)
    studies.import_optuna()
    LocalFiles().make_directory(args.output_dir)
    studies.open_storage(storage)
    threads = _split(args.parallel)
    return Search(
        space=space, metric=metric, direction="maximize" if args.mode == "max" else "minimize",
        trials=args.trials, output_dir=args.output_dir, train_argv=list(args.train_argv),
        storage=storage,
        study_name=args.study_name or os.path.basename(os.path.abspath(args.output_dir)),
        parallel=args.parallel, threads=threads, sampler=args.sampler,
        scheduler=args.scheduler, seed=args.seed, timeout=args.timeout,
        max_failures=args.max_failures, command=command or TRAIN,
        tracking=tracking.settings(shared.mlflow_uri, shared.experiment, shared.run_name,
                                   shared.mlflow_optional),
        fixed_argv=option_argv(fixed), evaluations=evaluations, epochs=epochs,
        pbt_interval=args.pbt_interval)


def _check_pbt(args, space) -> None:
    """--pbt_interval with --scheduler pbt and only there; and what PBT can search."""
    if (args.scheduler == "pbt") != (args.pbt_interval is not None):
        raise UserError("--scheduler pbt needs --pbt_interval STEPS" if args.pbt_interval
                        is None else "--pbt_interval is for --scheduler pbt; drop it")
    if args.scheduler == "pbt":
        from tfyard.tune.pbt import check

        check(space, args.trials, args.parallel)


def _train_options(argv: list[str]):
    """The shared train options, parsed and checked as `tfyard train` does; and the names
    they set."""
    parsed = add_train_arguments(Parser(prog="tfyard tune")).parse_args(argv)
    given = {name for name, value in vars(parsed).items() if value is not None}
    mine = sorted(given & {"output_dir", "work_dir"})
    if mine:
        raise UserError(f"--{mine[0]}: tune gives each trial its own (DIR/trials/NNNN); "
                        "leave it out")
    return options_from_args(parsed), given


def _cadence(shared, fixed: dict, searched: set, given: set) -> tuple[int, float | None]:
    """How often trials evaluate: their own --eval_every_epochs, else EVALUATIONS times over
    their --epochs (the pruner's rungs need figures along the way)."""
    if "eval_every_epochs" in given | searched | set(fixed):
        return 0, None
    if "train_steps" in given | searched | set(fixed):
        raise UserError("--max_number_of_steps: tune spaces a trial's evaluations by epochs; "
                        "give --epochs instead, or --eval_every_epochs")
    if "epochs" in searched:
        return EVALUATIONS, None
    epochs = fixed.get("epochs", shared.epochs)
    if epochs is None:
        raise UserError("give the trials' --epochs (on the command line or fixed in --space) "
                        "so tune can make each evaluate about ten times, or --eval_every_epochs")
    return EVALUATIONS, float(epochs)


def _split(parallel: int) -> int | None:
    """Each trial's CPU threads when several share the machine; refuses more trials than
    cores. Prints how the machine was split, tune's first line."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else os.cpu_count() or 1
    if parallel > cores:
        raise UserError(f"--parallel {parallel}: this machine has {cores} CPU core(s); run at "
                        f"most {cores} trials at once")
    if parallel == 1:
        print(f"tune: one trial at a time on all {cores} CPU core(s)", flush=True)
        return None
    threads = cores // parallel
    print(f"tune: {parallel} trials at a time, {threads} of {cores} CPU cores each "
          f"(TF_NUM_INTRAOP_THREADS={threads})", flush=True)
    return threads
