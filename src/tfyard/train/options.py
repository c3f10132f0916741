"""Training options, each declared once: `TrainOptions` fields carry their flag metadata
(spellings, help, choices, checks) and generate the argparse flags for `tfyard train`,
`tfyard bench` and the seed scripts; `run.json` is `to_dict()`, read back by `from_dict`.

A recipe holds the defaults a model family was published with; any flag the user sets
wins. No TensorFlow import here, so `tfyard train --help` is fast.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace

from tfyard import platform
from tfyard.distribute.strategy import STRATEGIES
from tfyard.dtypes import DTYPES
from tfyard.errors import UserError
from tfyard.flags import Parser
from tfyard.process import envvars
from tfyard.train.task import usercode


@dataclass(frozen=True)
class Recipe:
    """Published defaults for a model family: lr = base_lr x global_batch / base_batch."""

    batch_size: int
    base_lr: float
    base_batch: int
    epochs: float
    optimizer: str
    lr_schedule: str
    decay_epochs: tuple[float, ...]
    warmup_epochs: float
    weight_decay: float


RECIPES = {
    # Goyal et al. 2017 / TF official ResNet-50 v1.5: SGD 0.9, lr 0.1 x B/256, 5 warm-up epochs.
    "imagenet": Recipe(256, 0.1, 256, 90, "sgd", "piecewise", (30, 60, 80), 5, 1e-4),
    # He et al. 2016, CIFAR-10: lr 0.1 x B/128, /10 at epochs 91 and 136, stop at 182.
    "cifar": Recipe(128, 0.1, 128, 182, "sgd", "piecewise", (91, 136), 0, 2e-4),
    # The Keras MNIST convnet example: Adam(W) 1e-3, batch 128, 15 epochs.
    "mnist": Recipe(128, 1e-3, 128, 15, "adamw", "piecewise", (), 0, 0.0),
    # TF-Slim train_image_classifier: batch 32, lr 0.01, weight decay 4e-5.
    "slim": Recipe(32, 0.01, 32, 100, "sgd", "cosine", (), 0, 4e-5),
}


# --- value checks: each takes a parsed value and returns it, or raises ValueError ---------


def _finite(value) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{value} must be a finite number")
    return number


def _ranged(name: str, convert, within, rule: str):
    """A check named `name` (argparse shows it): `convert`, then refuse what is not `within`."""
    def check(value):
        number = convert(value)
        if not within(number):
            raise ValueError(f"{value} must be {rule}")
        return number

    check.__name__ = name
    return check


positive_int = _ranged("positive_int", int, lambda n: n > 0, "a positive integer")
nonnegative_int = _ranged("nonnegative_int", int, lambda n: n >= 0, "an integer >= 0")
positive_float = _ranged("positive_float", _finite, lambda n: n > 0, "> 0")
nonnegative_float = _ranged("nonnegative_float", _finite, lambda n: n >= 0, ">= 0")
fraction = _ranged("fraction", _finite, lambda n: 0 <= n < 1, "in [0, 1)")


def epoch_list(value) -> tuple[float, ...]:
    parts = value.split(",") if isinstance(value, str) else value
    return tuple(nonnegative_float(x) for x in parts if str(x).strip())


def step_range(value) -> tuple[int, int]:
    """`A,B` (or a pair): steps A to B, 1 <= A < B."""
    parts = [x for x in (value.split(",") if isinstance(value, str) else value) if str(x).strip()]
    if len(parts) != 2:
        raise ValueError(f"{value} must be two steps A,B")
    first, last = (int(x) for x in parts)
    if not 1 <= first < last:
        raise ValueError(f"{value} must be steps A,B with 1 <= A < B")
    return first, last


def layer_patterns(value) -> tuple[str, ...]:
    """`"a,b"` or `["a", "b"]` -> ("a", "b"): regular expressions matched from the start of
    layer names (`train.freezing`)."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    patterns = tuple(str(part).strip() for part in parts if str(part).strip())
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a regular expression ({exc})") from None
    if not patterns:
        raise ValueError("give one or more comma-separated layer-name patterns")
    return patterns


def flag_type(check: Callable) -> Callable:
    def convert(text: str):
        try:
            return check(text)
        except ValueError as exc:
            text = str(exc).replace("could not convert string to float: ", "not a number: ")
            raise argparse.ArgumentTypeError(text) from None
    convert.__name__ = check.__name__
    return convert


def opt(default=None, *aliases: str, help: str | None = None, check: Callable | None = None,
        choices: Iterable[str] | None = None, group: str = "optimisation",
        negate: tuple[str, ...] = (), platform_flag: bool = False, factory=None):
    """A TrainOptions field with its flag metadata.

    aliases: other spellings (classic ones included); check: converts and validates a
    value (argparse and the constructor both use it); negate: spellings that store False
    for a boolean; platform_flag: declared by `tfyard.platform` (the platform contract).
    """
    meta = {"aliases": aliases, "help": help, "check": check, "group": group,
            "choices": tuple(choices) if choices else None, "negate": negate,
            "platform": platform_flag}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _platform(name: str):
    return opt(None, platform_flag=True, group="platform")


def _startup_timeout() -> float:
    return envvars.number("TFYARD_STARTUP_TIMEOUT", 600.0)


WHAT, HOW, RUN = "what to train", "how long and how big", "distribution, checkpoints and output"
START = "start from trained weights (fine-tune)"
TRACK = "experiment tracking (MLflow; tfyard[mlflow])"


class _Checked:
    """Each field's `check` converts and validates it on construction (a UserError)."""

    def __post_init__(self):
        for f in fields(self):
            value, check = getattr(self, f.name), f.metadata["check"]
            if value is None or check is None:
                continue
            try:
                object.__setattr__(self, f.name, check(value))
            except (ValueError, TypeError) as exc:
                raise UserError(f"--{f.name} {value!r}: {exc}") from None


@dataclass(frozen=True)
class RunOptions(_Checked):
    """What every run has, whatever it trains: the model and data it names, the platform,
    steps and batch, cadence, strategy, seed, dtype, XLA, checkpoints and output."""

    model: str = opt("cifar_resnet20", "--model_name", "--model-name", group=WHAT,
                     help="model name from `tfyard models` (classic: --model_name=vgg_19), or "
                     "your own: MODULE:FUNCTION (nets.mine:build or nets/mine.py:build), a "
                     "function taking num_classes and/or input_shape and returning a "
                     "keras.Model (compiled: trained as compiled)")
    dataset: str = opt("digits", "--dataset_name", group=WHAT,
                       help="dataset name from the data registry (default: digits)")
    data_dir: str | None = _platform("data_dir")
    output_dir: str | None = _platform("output_dir")
    work_dir: str | None = _platform("work_dir")
    log_dir: str | None = _platform("log_dir")
    num_gpus: str | None = _platform("num_gpus")
    init_checkpoint: str | None = opt(
        None, group=START, help="start from these weights: a run directory (its newest "
        "checkpoint), a checkpoint prefix (out/checkpoints/ckpt-200), a .keras, .weights.h5 "
        "or Keras .h5 file (Keras Applications' ImageNet weights, with or without the top), "
        "locally or in a bucket (s3://..., gs://...). "
        "Only arrays are read, never code. Strict: a weight the source lacks or holds with "
        "another shape is an error, but the classifier head starts fresh when its class count "
        "differs. A resume keeps its own checkpoint and does not apply it again")
    init_exclude: tuple[str, ...] | None = opt(
        None, check=layer_patterns, group=START, help="layers not to load, started fresh: "
        "comma-separated regular expressions matched from the start of layer names (slim's "
        "--checkpoint_exclude_scopes)")
    init_allow_missing: bool = opt(False, group=START, help="start the weights the source "
                                   "lacks fresh instead of failing (slim's --ignore_missing_vars)")
    init_fresh_head: bool = opt(False, group=START, help="start the classifier head fresh even "
                                "where the source's fits (the official ResNet's "
                                "--pretrained_model_checkpoint_path)")
    trainable: tuple[str, ...] | None = opt(
        None, check=layer_patterns, group=START, help="train only the layers matching these "
        "patterns (as --init_exclude) and freeze the rest (slim's --trainable_scopes)")
    freeze: tuple[str, ...] | None = opt(
        None, check=layer_patterns, group=START, help="freeze the layers matching these "
        "patterns: their weights and batch-norm statistics do not change")
    train_head_only: bool = opt(False, "--fine_tune", group=START, help="train only the "
                                "classifier head, freeze the rest (the official ResNet's "
                                "--fine_tune)")
    batch_size: int | None = opt(None, "--train-batch-size", "--train_batch_size", group=HOW,
                                 check=positive_int,
                                 help="global batch over all replicas (default: the recipe's)")
    per_replica_batch_size: int | None = opt(None, check=positive_int, group=HOW,
                                             help="batch per replica instead of --batch_size")
    epochs: float | None = opt(None, "--train_epochs", "--train-epochs", check=positive_float,
                               group=HOW, help="epochs to train (default: recipe)")
    train_steps: int | None = opt(None, "--max_number_of_steps", check=positive_int, group=HOW,
                                  help="total steps; overrides --epochs")
    steps_per_loop: int = opt(10, check=positive_int, group=HOW,
                              help="steps run per tf.function call (default: {default})")
    dtype: str = opt("float32", choices=DTYPES,
                     help="compute dtype; float16 uses dynamic loss scaling")
    jit_compile: bool | None = opt(None, "--xla", negate=("--no_jit_compile", "--no_xla"),
                                   help="compile the step with XLA (default: on GPUs, and on a "
                                   "CPU without TensorFlow's faster oneDNN kernels; off for "
                                   "parameter-server and synchronized batch norm); "
                                   "--no_jit_compile never")
    skip_nonfinite_steps: int = opt(0, check=nonnegative_int, help="N > 0: skip each update "
                                    "whose loss or gradients are not finite (float16 loss "
                                    "scaling already does) and stop after N in a row; 0 "
                                    "(default): a non-finite loss stops the run")
    sync_batch_norm: bool = opt(False, help="batch-norm statistics over all replicas")
    seed: int | None = opt(None, check=int)
    ds: str | None = opt(None, "--distribution_strategy", choices=STRATEGIES, group=RUN,
                         help="override the strategy chosen from TF_CONFIG and GPUs")
    cpu_replicas: int = opt(1, check=positive_int, group=RUN, help="split the CPU into N "
                            "logical devices (mirrored on CPU-only hosts)")
    eval_every_epochs: float | None = opt(None, check=positive_float, group=RUN, help="evaluate "
                                          "on the validation split this often (default: end)")
    checkpoint_every_steps: int | None = opt(None, check=positive_int, group=RUN, help="also "
                                             "checkpoint every N steps (always at epoch ends)")
    keep_checkpoints: int = opt(3, check=positive_int, group=RUN)
    record_example_ids: bool = opt(False, group=RUN, help="debug: append the ids of the "
                                   "examples each step consumed to <work_dir>/example_ids/ "
                                   "(needs --seed)")
    startup_timeout: float = opt(factory=_startup_timeout, check=positive_float, group=RUN,
                                 help="seconds to wait for other cluster members before giving "
                                 "up (env TFYARD_STARTUP_TIMEOUT; default: 600)")
    export: bool = opt(True, negate=("--no_export",), group=RUN,
                       help="write export/ at the end (default); --no_export skips it")
    quiet: bool = opt(False, group=RUN, help="warnings only, no progress output")
    profile_steps: tuple[int, int] | None = opt(
        None, check=step_range, group=RUN, help="A,B: a TensorBoard profiler trace of steps A "
        "to B in <log_dir>/train (chief or single process)")
    mlflow_uri: str | None = opt(None, group=TRACK, help="log the run to this MLflow tracking "
                                 "server (env MLFLOW_TRACKING_URI; the flag wins): params, "
                                 "metrics, files and the model, by the chief alone; a resumed "
                                 "run continues its MLflow run")
    experiment: str | None = opt(None, group=TRACK, help="the MLflow experiment (env "
                                 "MLFLOW_EXPERIMENT_NAME; default: MLflow's Default)")
    run_name: str | None = opt(None, group=TRACK, help="the MLflow run's name (default: the "
                               "output directory's name)")
    mlflow_optional: bool = opt(False, group=TRACK, help="when the tracking server cannot be "
                                "used at the start, train untracked (default: stop before "
                                "step 1)")
    register_model: str | None = opt(None, group=TRACK, help="register the exported model in "
                                     "MLflow's model registry under this name")


@dataclass(frozen=True)
class RecipeOptions(_Checked):
    """tfyard's optimisation recipe, for a model that is not compiled (a compiled model
    trains with its own optimizer); None takes the model family's published value."""

    learning_rate: float | None = opt(None, check=positive_float, help="peak learning rate as "
                                      "given (default: recipe, scaled by batch)")
    optimizer: str | None = opt(None, choices=("sgd", "adamw"))
    momentum: float = opt(0.9, check=fraction, help="SGD momentum, in [0, 1) (default: {default})")
    nesterov: bool = opt(False)
    lr_schedule: str | None = opt(None, choices=("piecewise", "cosine"))
    decay_epochs: tuple[float, ...] | None = opt(
        None, check=epoch_list, help="piecewise: comma-separated epochs where lr drops 10x")
    warmup_epochs: float | None = opt(None, check=nonnegative_float)
    weight_decay: float | None = opt(None, check=nonnegative_float, help="L2 on kernels for "
                                     "SGD, decoupled for AdamW (default: recipe)")


@dataclass(frozen=True)
class ClassificationOptions(_Checked):
    """Image classification: the registry datasets' image and label fields, the
    recipe's loss (label smoothing) and the registry ResNets' initialisation."""

    image_size: int | None = opt(None, check=positive_int, group=WHAT,
                                 help="square input size (default: the dataset's)")
    resnet_size: int | None = opt(None, "--resnet-size", check=positive_int, group=WHAT,
                                  help="classic ResNet depth: 50 -> resnet50, or cifar_resnetN "
                                  "on CIFAR data (the command line resolves it into --model)")
    label_offset: int | None = opt(None, check=int, group=WHAT, help="added to stored labels "
                                   "(ImageNet default -1 makes 1..1000 zero-based)")
    label_smoothing: float = opt(0.0, check=fraction, help="in [0, 1) (default: {default})")
    zero_init_residual: bool = opt(False, help="zero the last batch-norm gamma of each "
                                   "residual block")
    data_threads: int | None = opt(None, check=positive_int, group=RUN,
                                   help="input pipeline threads (default: AUTOTUNE)")
    skip_corrupt: bool = opt(False, group=RUN,
                             help="drop records that fail to decode and count them")


@dataclass(frozen=True)
class TrainOptions(ClassificationOptions, RecipeOptions, RunOptions):
    """Everything `tfyard train` accepts (one flat run.json); None means "take it from the
    recipe"."""

    def recipe_changes(self) -> list[str]:
        """The recipe's fields (and label smoothing) set away from their defaults: a
        compiled model trains as compiled, so these would be ignored."""
        names = [f.name for f in fields(RecipeOptions)] + ["label_smoothing"]
        default = TrainOptions()
        return [n for n in names if getattr(self, n) != getattr(default, n)]

    def with_updates(self, **changes) -> TrainOptions:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TrainOptions:
        """Options from `to_dict()` output (run.json); unknown keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})  # checks normalize

    def to_argv(self, names: Iterable[str] | None = None) -> list[str]:
        """The command line that parses back to these options (flags that differ from the
        defaults; `names` limits it to those fields)."""
        default = TrainOptions()
        argv = []
        for f in fields(self):
            value = getattr(self, f.name)
            if (names is not None and f.name not in names) or value == getattr(default, f.name):
                continue
            if isinstance(value, bool) or f.metadata["negate"] and value is not None:
                argv.append(f"--{f.name}" if value else f.metadata["negate"][0])
            elif isinstance(value, tuple):
                argv += [f"--{f.name}", ",".join(str(x) for x in value)]
            else:
                argv += [f"--{f.name}", str(value)]
        return argv


def add_option_arguments(parser, names: Iterable[str] | None = None,
                         defaults: dict | None = None, grouped: bool = True,
                         helps: dict | None = None):
    """Add the flags of the TrainOptions fields `names` (all but the platform's by default),
    in help groups unless `grouped` is False (a mutually exclusive group, say).

    Every flag defaults to None (absent); the dataclass default applies, or `defaults`.
    `helps` replaces a field's help where a command gives the flag another meaning.
    """
    groups: dict[str, object] = {}
    defaults, helps = defaults or {}, helps or {}
    for f in fields(TrainOptions):
        meta = f.metadata
        if meta["platform"] or (names is not None and f.name not in names):
            continue
        if meta["group"] not in groups:
            groups[meta["group"]] = parser.add_argument_group(meta["group"]) if grouped \
                else parser
        group = groups[meta["group"]]
        spellings = (f"--{f.name}", *meta["aliases"])
        default = defaults.get(f.name)
        help_text = helps.get(f.name, meta["help"])
        if help_text and "{default}" in help_text:  # the default in use, declared once
            help_text = help_text.replace("{default}", str(f.default if default is None
                                                             else default))
        elif default is not None:
            help_text = f"{help_text or ''} (default: {default})".lstrip()
        if f.type in ("bool", "bool | None"):
            group.add_argument(*spellings, dest=f.name, action="store_true", default=default,
                               help=help_text)
            if meta["negate"]:
                group.add_argument(*meta["negate"], dest=f.name, action="store_false",
                                   help=f"turn --{f.name} off")
            continue
        group.add_argument(*spellings, dest=f.name, default=default, help=help_text,
                           choices=meta["choices"],
                           type=flag_type(meta["check"]) if meta["check"] else None)
    return parser


def add_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add every training flag, including the classic spellings, to `parser`."""
    platform.add_platform_arguments(parser)
    add_option_arguments(parser)
    return parser


def options_from_args(args: argparse.Namespace, **overrides) -> TrainOptions:
    """Build TrainOptions from parsed flags, resolving --resnet_size into a model name."""
    from tfyard.models import check_input_size, resolve_alias

    names = {f.name for f in fields(TrainOptions)}
    values = {k: v for k, v in vars(args).items() if k in names and v is not None}
    values.update(overrides)
    dataset = values.get("dataset", TrainOptions.dataset)
    model = values.get("model")
    resnet_size = values.pop("resnet_size", None)   # resolved into the model's name here
    if resnet_size is not None and model is None and dataset.startswith("cifar"):
        model = f"cifar_resnet{resnet_size}"
        resnet_size = None
    if usercode.is_reference(model):   # the user's MODULE:FUNCTION, imported at start
        return TrainOptions(**values)
    values["model"] = resolve_alias(model=model or (None if resnet_size else TrainOptions.model),
                                    resnet_size=resnet_size)
    if values.get("image_size"):
        check_input_size(values["model"], values["image_size"], values["image_size"])
    return TrainOptions(**values)


def parse_train_args(argv: list[str] | None, prog: str = "tfyard train") -> TrainOptions:
    """Parse a training command line (used by seed scripts and `tfyard.train.run`)."""
    parser = add_train_arguments(Parser(prog=prog, description="Train an image classifier."))
    return options_from_args(parser.parse_args(argv))


@dataclass(frozen=True)
class Resolved:
    """The concrete numbers a run uses, after recipe, batch and replica arithmetic."""

    global_batch: int | None       # None: a user's input whose batch size varies
    per_replica_batch: int | None
    learning_rate: float
    optimizer: str
    lr_schedule: str
    decay_epochs: tuple[float, ...]
    warmup_epochs: float
    weight_decay: float
    steps_per_epoch: int
    total_steps: int


def resolve_numbers(options: TrainOptions, family: str, replicas: int,
                    train_examples: int | None, *, input_batch: int | None = None,
                    input_steps: int | None = None) -> Resolved:
    """Apply the recipe, check the batch against the replicas, and count steps.

    A user's input function decides its own batch (`input_batch`, the global batch of its
    per-replica batches, None when their size varies) and its epoch (`input_steps`, None
    when it is endless: then the steps must be given; more steps than one epoch repeat the
    input, epoch after epoch, as registry datasets do)."""
    recipe = RECIPES[family]
    if train_examples is None:   # a user's input function
        global_batch = input_batch or options.batch_size or (
            options.per_replica_batch_size or 0) * replicas or None
        asked = options.batch_size or (options.per_replica_batch_size or 0) * replicas
        if input_batch and asked and asked != input_batch:
            raise UserError(f"the input's batches make a global batch of {input_batch} over "
                            f"{replicas} replica(s), not the {asked} asked; drop batch_size or "
                            "batch the input to match")
        if input_steps is None and options.train_steps is None:
            raise UserError("the input is endless (or its length is unknown), so it has no "
                            "epochs: give train_steps (--train_steps)")
        steps_per_epoch = input_steps or options.train_steps
        epochs = options.epochs or 1   # Keras fit's default
    else:
        if options.per_replica_batch_size is not None:
            if options.batch_size is not None:
                raise UserError("give --batch_size or --per_replica_batch_size, not both")
            global_batch = options.per_replica_batch_size * replicas
        else:
            global_batch = options.batch_size or recipe.batch_size
        if global_batch % replicas:
            raise UserError(
                f"--batch_size {global_batch} does not divide over {replicas} replicas; use a "
                f"multiple of {replicas} or --per_replica_batch_size"
            )
        steps_per_epoch = max(1, train_examples // global_batch)
        epochs = options.epochs or recipe.epochs
    if options.train_steps is not None:
        total = options.train_steps
    else:
        total = max(1, round(epochs * steps_per_epoch))
    lr = options.learning_rate or recipe.base_lr * (global_batch or recipe.base_batch) \
        / recipe.base_batch
    return Resolved(
        global_batch=global_batch,
        per_replica_batch=global_batch // replicas if global_batch else None,
        learning_rate=lr,
        optimizer=options.optimizer or recipe.optimizer,
        lr_schedule=options.lr_schedule or recipe.lr_schedule,
        decay_epochs=options.decay_epochs if options.decay_epochs is not None
        else recipe.decay_epochs,
        warmup_epochs=options.warmup_epochs if options.warmup_epochs is not None
        else recipe.warmup_epochs,
        weight_decay=options.weight_decay if options.weight_decay is not None
        else recipe.weight_decay,
        steps_per_epoch=steps_per_epoch,
        total_steps=total,
    )
