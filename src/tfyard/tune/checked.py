"""A tune command checked whole before any trial: every refusal of `tfyard tune` and of
`tfyard.tune(...)` is here or in `tune.settings`' declaration, one line each, so both say
the same and a typo costs no training. Both doors build the same `TuneSettings` and call
`search` with them."""

from __future__ import annotations

import os
import shutil
import subprocess

from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.platform import check_data_dir
from tfyard.process.cpus import usable_cpus
from tfyard.train.options import add_train_arguments, options_from_args
from tfyard.tune import onray
from tfyard.tune.settings import TuneSettings
from tfyard.tune.space import RefusingParser

# The least GPU memory a trial sharing a GPU may get: TensorFlow's CUDA context, cuDNN and
# cuBLAS take about half of it before the first tensor.
TRIAL_GPU_MIB = 1024

EVALUATIONS = 10   # a trial's evaluations, the pruner's rungs


def search(settings: TuneSettings, train_argv=()):
    """The checked search: `settings` tune's own (checked as they were built), `train_argv`
    the `tfyard train` flags every trial shares."""
    from tfyard import tracking
    from tfyard.runfiles.files import LocalFiles
    from tfyard.runfiles.place import StudyPlace
    from tfyard.runfiles.study import refuse_a_run
    from tfyard.storage import in_bucket, require_writable
    from tfyard.tracking.mlflow_run import usable
    from tfyard.tune import study as studies
    from tfyard.tune.search import Search
    from tfyard.tune.space import option_argv, read_space

    s = settings
    measured = studies.metric(s.metric)
    ray = onray.check(s.on, s.address, s.workers, s.cpus_per_member, s.gpus_per_member)
    train_argv = [str(flag) for flag in train_argv]
    shared, given = _train_options(train_argv)
    tracked = tracking.settings(shared.mlflow_uri, shared.experiment, shared.run_name,
                                shared.mlflow_optional)
    if in_bucket(s.output_dir, OUTPUT_FLAG):
        _check_bucket(s.storage)
    params = read_space(s.space)
    both = sorted(given.keys() & {p.name for p in params})
    if both:
        raise UserError(f"{', '.join(both)}: both in --space and on the command line; keep one")
    searched = {p.name for p in params if p.kind}
    if s.sampler == "grid" and any(p.kind not in (None, "choice") for p in params):
        wrong = next(p for p in params if p.kind not in (None, "choice"))
        raise UserError(f"--sampler grid takes choice entries only; {wrong.name} is "
                        f"{wrong.kind}: give it as {{choice: [...]}} or pick tpe or random")
    _check_pbt(s.scheduler, s.pbt_interval, params, s.trials, s.parallel)
    fixed = {p.name: p.values[0] for p in params if not p.kind}
    evaluations, budget, length = _cadence(shared, fixed, searched, given)
    _check_min_resource(s, evaluations, budget, length)
    studies.import_optuna()
    place = StudyPlace(s.output_dir)
    if place.url:   # the checks that ask a server: after every check that does not
        require_writable(s.output_dir, OUTPUT_FLAG)
    tracked = usable(tracked)
    threads, gpus = _split(s.parallel, shared.num_gpus) if ray is None else (ray.threads, ())
    checked = Search(
        space=params, metric=measured, direction="maximize" if s.mode == "max" else "minimize",
        trials=s.trials, output_dir=s.output_dir, train_argv=train_argv,
        storage=s.storage or studies.default_storage(s.output_dir),
        study_name=s.study_name or place.name,
        parallel=s.parallel, threads=threads, gpus=gpus, sampler=s.sampler,
        scheduler=s.scheduler, seed=s.seed, timeout=s.timeout, max_failures=s.max_failures,
        tracking=tracked, fixed_argv=option_argv(fixed), evaluations=evaluations,
        budget=budget, length=length, min_resource=s.min_resource,
        pbt_interval=s.pbt_interval, ray=ray, shared=given, settings=s.recorded())
    refuse_a_run(place.runs.root)
    database = None if s.storage else place.home.database
    studies.refuse_a_second_study(place, checked.storage, database, checked.study_name)
    studies.refuse_another_identity(checked.storage, database, checked.study_name,
                                    checked.identity())
    LocalFiles().make_directory(place.home.root)   # nothing is written before this point
    studies.open_storage(checked.storage)
    return checked


def _check_bucket(storage: str | None) -> None:
    """A study in a bucket needs a database it can share (a bucket that is missing or cannot
    be written is refused too, once the cheap checks have passed)."""
    if not storage:
        raise UserError("--output_dir in a bucket needs --storage URL (a database the study "
                        "can share; SQLite cannot live in a bucket)")


def _check_min_resource(settings: TuneSettings, evaluations: int, budget: str,
                        length: float | None) -> None:
    """--min_resource with a pruner that has rungs, inside the trials' budget."""
    given = settings.min_resource
    if given is None:
        return
    if settings.scheduler not in ("median", "asha"):
        raise UserError(f"--min_resource is for --scheduler median or asha, not "
                        f"{settings.scheduler}; drop it")
    unit = "epochs" if budget == "epochs" else "steps"
    if evaluations and length is not None and given >= length:
        raise UserError(f"--min_resource {given:g} is past the trials' whole budget of "
                        f"{length:g} {unit}; give less than {length:g} ({unit})")


def _check_pbt(scheduler: str, interval: int | None, space, trials: int,
               parallel: int) -> None:
    """--pbt_interval with --scheduler pbt and only there; and what PBT can search."""
    if (scheduler == "pbt") != (interval is not None):
        raise UserError("--scheduler pbt needs --pbt_interval STEPS" if interval is None
                        else "--pbt_interval is for --scheduler pbt; drop it")
    if scheduler == "pbt":
        from tfyard.tune.pbt import check

        check(space, trials, parallel)


def _train_options(argv: list[str]):
    """The shared train options, parsed and checked as `tfyard train` does; and those the
    flags set, by name."""
    parsed = add_train_arguments(RefusingParser(prog="tfyard train")).parse_args(argv)
    given = {name: value for name, value in vars(parsed).items() if value is not None}
    mine = sorted(given.keys() & {"output_dir", "work_dir"})
    if mine:
        raise UserError(f"--{mine[0]}: tune gives each trial its own (DIR/trials/NNNN); "
                        "leave it out")
    data_dir = parsed.data_dir or os.environ.get("TFYARD_DATA_DIR") or None   # as train picks
    check_data_dir(data_dir, "--data_dir" if parsed.data_dir else "TFYARD_DATA_DIR")
    return options_from_args(parsed), given


def _cadence(shared, fixed: dict, searched: set, given: dict) -> tuple[int, str, float | None]:
    """How often trials evaluate: (EVALUATIONS, the budget's option, its length) to space
    them evenly over each trial's --train_steps or --epochs (None where the space searches
    it: each trial's own); (0, ...) where the trials' own --eval_every_* spaces them."""
    chosen = given.keys() | searched | set(fixed)
    if chosen & {"eval_every_epochs", "eval_every_steps"}:
        return 0, "epochs", None
    for budget in ("train_steps", "epochs"):   # train_steps, when given, overrides epochs
        if budget in searched:
            return EVALUATIONS, budget, None
        length = fixed.get(budget, getattr(shared, budget))
        if length is not None:
            return EVALUATIONS, budget, float(length)
    raise UserError("give the trials' budget, --train_steps or --epochs (on the command line "
                    "or fixed in --space), so tune can make each evaluate about ten times; "
                    "or their own --eval_every_steps or --eval_every_epochs")


def _split(parallel: int, num_gpus: str | None) -> tuple[int | None, tuple[str, ...]]:
    """Each trial's CPU threads when several share the machine, and each trial slot's GPUs
    (`gpu_shares`; none where the trials' --num_gpus is 0); refuses more trials than cores.
    Prints how the machine was split, tune's first line (Ray places its trials itself)."""
    from tfyard.platform import visible_gpu_ids

    cores = len(usable_cpus())
    if parallel > cores:
        raise UserError(f"--parallel {parallel}: this machine has {cores} CPU core(s); run at "
                        f"most {cores} trials at once")
    gpus = [] if num_gpus == "0" else visible_gpu_ids()
    shares = gpu_shares(gpus, parallel)
    refuse_starved(shares, gpu_memory_mib(gpus))
    threads = cores // parallel if parallel > 1 else None
    split = (f"{parallel} trials at a time, {threads} of {cores} CPU cores each "
             f"(TF_NUM_INTRAOP_THREADS={threads})") if threads else \
        f"one trial at a time on all {cores} CPU core(s)"
    print(f"tune: {split}{_described_shares(shares)}", flush=True)
    return threads, shares


def gpu_shares(gpus: list[str], parallel: int) -> tuple[str, ...]:
    """The CUDA_VISIBLE_DEVICES of each of `parallel` trial slots: GPUs of its own where
    there are enough (an equal number each), else one GPU that trials share round-robin
    (each with memory growth on, so each takes only what it uses)."""
    if not gpus:
        return ()
    if parallel > len(gpus):
        return tuple(gpus[slot % len(gpus)] for slot in range(parallel))
    each = len(gpus) // parallel
    return tuple(",".join(gpus[slot * each:(slot + 1) * each]) for slot in range(parallel))


def gpu_memory_mib(gpus: list[str]) -> dict[str, int]:
    """Each of `gpus`' memory in MiB (a CUDA_VISIBLE_DEVICES name: an index or a UUID), as
    nvidia-smi reports it; {} without nvidia-smi, where nothing is checked."""
    smi = shutil.which("nvidia-smi")
    if not gpus or not smi:
        return {}
    try:
        table = subprocess.run([smi, "--query-gpu=index,uuid,memory.total",
                                "--format=csv,noheader,nounits"], capture_output=True,
                               text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return memory_of(gpus, table)


def memory_of(gpus: list[str], table: str) -> dict[str, int]:
    """`gpus`' memory in MiB from nvidia-smi's CSV rows `index, uuid, memory.total`."""
    memory = {}
    for row in table.splitlines():
        index, uuid, total = ([*(cell.strip() for cell in row.split(",")), "", ""])[:3]
        if total.isdigit():
            memory[index] = memory[uuid] = int(total)
    return {gpu: memory[gpu] for gpu in gpus if gpu in memory}


def refuse_starved(shares: tuple[str, ...], memory: dict[str, int]) -> None:
    """Refuse trial slots that share a GPU (`shares`, `gpu_shares`) so many ways that each
    gets less than `TRIAL_GPU_MIB` of its `memory` (MiB by GPU), naming the most that fit."""
    shared = [gpu for gpu in dict.fromkeys(shares) if gpu in memory and shares.count(gpu) > 1]
    starved = [gpu for gpu in shared if memory[gpu] // shares.count(gpu) < TRIAL_GPU_MIB]
    if not starved:
        return
    gpu = starved[0]
    fit = len(set(shares)) * min(memory[g] // TRIAL_GPU_MIB for g in set(shares) if g in memory)
    raise UserError(f"--parallel {len(shares)}: {shares.count(gpu)} trials would share GPU "
                    f"{gpu}'s {memory[gpu]} MiB, {memory[gpu] // shares.count(gpu)} MiB each, "
                    f"under the {TRIAL_GPU_MIB} MiB a TensorFlow trial needs; give --parallel "
                    f"{max(fit, 1)} or fewer, or --num_gpus 0 to train on the CPUs")


def _described_shares(shares: tuple[str, ...]) -> str:
    if not shares:
        return ""
    if len(shares) == 1:
        return f", GPU(s) {shares[0]} (memory growth on)"
    if len(set(shares)) < len(shares):
        return (f"; {len(shares)} trials share GPU(s) {', '.join(sorted(set(shares)))} "
                "round-robin, memory growth on")
    return f"; each trial on its own GPU(s): {' | '.join(shares)}, memory growth on"


def trial_argv(model, data, options: dict) -> list[str]:
    """The `tfyard train` flags of `tfyard.tune`'s model, data and train options: each
    trial is a process of its own, so a function goes by the name that imports it again."""
    from tfyard.train.task.usercode import reference_of
    from tfyard.tune.space import OPTIONS, option_argv

    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UserError(f"tfyard.tune: unknown option(s) {', '.join(unknown)}; the options "
                        "are those of `tfyard train --help` by their Python names, and "
                        f"tune's own: {', '.join(sorted(TuneSettings.names()))}")
    for name, value in (("model", model), ("dataset", data)):
        if callable(value):
            value = reference_of(value)
            if value is None:
                raise UserError(f"tfyard.tune: {name}: a lambda or nested function cannot be "
                                "imported by the trials' processes; give a module-level "
                                "function or 'module:function'")
        if value is not None and name in options:
            raise UserError(f"tfyard.tune: {name} given twice; keep one")
        if value is not None:
            options = {**options, name: value}
    return option_argv(options)
