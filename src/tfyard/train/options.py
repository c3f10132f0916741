"""Training options, each declared once: `TrainOptions` fields carry their flag metadata
(spellings, help, choices, checks) and generate the argparse flags for `tfyard train`,
`tfyard bench` and the seed scripts (`tfyard.flags.declared`); `run.json` is `to_dict()`,
read back by `from_dict`.

None takes the value from the model family's published recipe (`train.task.recipes`); any
flag the user sets wins. No TensorFlow import here, so `tfyard train --help` is fast.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace

from tfyard import platform
from tfyard.distribute.strategy import STRATEGIES
from tfyard.dtypes import CHOICES as DTYPE_CHOICES
from tfyard.flags import Parser
from tfyard.flags.declared import (
    Checked,
    add_field_arguments,
    command_line,
    fraction,
    nonnegative_float,
    nonnegative_int,
    opt,
    positive_float,
    positive_int,
)
from tfyard.process import envvars
from tfyard.process.sizes import byte_size
from tfyard.train.task import usercode


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


def _platform(name: str):
    return opt(None, platform_flag=True, group="platform")


def _startup_timeout() -> float:
    return envvars.number("TFYARD_STARTUP_TIMEOUT", 600.0)


WHAT, HOW, RUN = "what to train", "how long and how big", "distribution, checkpoints and output"
START = "start from trained weights (fine-tune)"
TRACK = "experiment tracking (MLflow; tfyard[mlflow])"


@dataclass(frozen=True)
class RunOptions(Checked):
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
    dtype: str = opt("float32", choices=DTYPE_CHOICES,
                     help="compute dtype; float16 uses dynamic loss scaling; auto: bfloat16 "
                     "where the hardware computes it natively (a CPU with AMX or "
                     "AVX512_BF16, a GPU of compute capability 8.0+), else float32; run.json "
                     "keeps the answer for a resume (default: {default})")
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
    eval_every_steps: int | None = opt(None, check=positive_int, group=RUN, help="evaluate "
                                       "every N steps instead (not with --eval_every_epochs)")
    checkpoint_every_steps: int | None = opt(None, check=positive_int, group=RUN, help="also "
                                             "checkpoint every N steps (always at epoch ends)")
    keep_checkpoints: int = opt(3, check=positive_int, group=RUN)
    pause_at_step: int | None = opt(None, check=positive_int, group=RUN, help="stop at step N "
                                    "as a preempted run stops (a checkpoint at N), but exit 79, "
                                    "which launchers end the job on instead of restarting it, "
                                    "so a scheduler can act between intervals (tune's PBT); "
                                    "the same command with a later N, or none, goes on")
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
class RecipeOptions(Checked):
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
class ClassificationOptions(Checked):
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
    data_cache_limit: int | None = opt(
        None, check=byte_size, group=RUN, help="local disk that --data_dir in a bucket may "
        "take in the work dir: 500MB (10^6-byte units) or 500MiB (2^20). A TFRecord set "
        "larger than it is not copied whole: its shards are fetched ahead in the order "
        "training reads them and removed once read, the files being read counted: it is a "
        "cap, and a limit below the shards read at once is refused naming the smallest "
        "that works (default: TFYARD_DATA_CACHE_LIMIT, else half the work dir's free "
        "space)")
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
        return command_line(self, names)


def add_option_arguments(parser, names: Iterable[str] | None = None,
                         defaults: dict | None = None, grouped: bool = True,
                         helps: dict | None = None):
    """Add the flags of the TrainOptions fields `names` (all but the platform's by default);
    the rest as `flags.declared.add_field_arguments`."""
    return add_field_arguments(parser, TrainOptions, names, defaults, grouped, helps)


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
