"""Training options: the flags (with the classic spellings), and the published recipes.

A recipe holds the defaults a model family was published with; any flag the user sets
wins. No TensorFlow import here, so `tfyard train --help` is fast.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields, replace

from tfyard import platform
from tfyard.distribute.strategy import STRATEGIES
from tfyard.errors import UserError


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


@dataclass(frozen=True)
class TrainOptions:
    """Everything `tfyard train` accepts; None means "take it from the recipe"."""

    model: str = "cifar_resnet20"
    dataset: str = "digits"
    data_dir: str | None = None
    output_dir: str | None = None
    work_dir: str | None = None
    log_dir: str | None = None
    num_gpus: str | None = None
    batch_size: int | None = None
    per_replica_batch_size: int | None = None
    epochs: float | None = None
    train_steps: int | None = None
    learning_rate: float | None = None
    optimizer: str | None = None
    momentum: float = 0.9
    nesterov: bool = False
    lr_schedule: str | None = None
    decay_epochs: tuple[float, ...] | None = None
    warmup_epochs: float | None = None
    label_smoothing: float = 0.0
    weight_decay: float | None = None
    dtype: str = "float32"
    jit_compile: bool | None = None
    steps_per_loop: int = 10
    eval_every_epochs: float | None = None
    checkpoint_every_steps: int | None = None
    keep_checkpoints: int = 3
    seed: int | None = None
    ds: str | None = None
    image_size: int | None = None
    label_offset: int | None = None
    data_threads: int | None = None
    skip_corrupt: bool = False
    sync_batch_norm: bool = False
    zero_init_residual: bool = False
    cpu_replicas: int = 1
    startup_timeout: float = 600.0
    export: bool = True
    quiet: bool = False

    def with_updates(self, **changes) -> TrainOptions:
        return replace(self, **changes)


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive integer")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be positive")
    return value


def _epoch_list(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def add_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add every training flag, including the classic spellings, to `parser`."""
    platform.add_platform_arguments(parser)
    what = parser.add_argument_group("what to train")
    what.add_argument("--model", "--model_name", "--model-name", dest="model", default=None,
                      help="model name from `tfyard models` (classic: --model_name=vgg_19)")
    what.add_argument("--resnet_size", "--resnet-size", type=int, default=None,
                      help="classic ResNet depth: 50 -> resnet50, or cifar_resnetN on CIFAR data")
    what.add_argument("--dataset", "--dataset_name", default=None,
                      help="dataset name from the data registry (default: digits)")
    what.add_argument("--image_size", type=positive_int, default=None,
                      help="square input size (default: the dataset's)")
    what.add_argument("--label_offset", type=int, default=None,
                      help="added to stored labels (ImageNet default -1 makes 1..1000 zero-based)")
    how = parser.add_argument_group("how long and how big")
    how.add_argument("--batch_size", "--train-batch-size", "--train_batch_size",
                     dest="batch_size", type=positive_int, default=None,
                     help="global batch over all replicas (default: the recipe's)")
    how.add_argument("--per_replica_batch_size", type=positive_int, default=None,
                     help="batch per replica instead of --batch_size")
    how.add_argument("--epochs", "--train_epochs", "--train-epochs", dest="epochs",
                     type=positive_float, default=None, help="epochs to train (default: recipe)")
    how.add_argument("--train_steps", "--max_number_of_steps", dest="train_steps",
                     type=positive_int, default=None, help="total steps; overrides --epochs")
    how.add_argument("--steps_per_loop", type=positive_int, default=10,
                     help="steps run per tf.function call (default: 10)")
    opt = parser.add_argument_group("optimisation")
    opt.add_argument("--learning_rate", type=positive_float, default=None,
                     help="peak learning rate as given (default: recipe, scaled by batch)")
    opt.add_argument("--optimizer", choices=("sgd", "adamw"), default=None)
    opt.add_argument("--momentum", type=float, default=0.9)
    opt.add_argument("--nesterov", action="store_true")
    opt.add_argument("--lr_schedule", choices=("piecewise", "cosine"), default=None)
    opt.add_argument("--decay_epochs", type=_epoch_list, default=None,
                     help="piecewise: comma-separated epochs where lr drops 10x")
    opt.add_argument("--warmup_epochs", type=float, default=None)
    opt.add_argument("--label_smoothing", type=float, default=0.0)
    opt.add_argument("--weight_decay", type=float, default=None,
                     help="L2 on kernels for SGD, decoupled for AdamW (default: recipe)")
    opt.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                     help="compute dtype; float16 uses dynamic loss scaling")
    opt.add_argument("--jit_compile", "--xla", dest="jit_compile", action="store_true",
                     default=None, help="compile the step with XLA (default: on where safe, "
                     "as Keras fit does; off for parameter-server and synchronized batch norm)")
    opt.add_argument("--no_jit_compile", "--no_xla", dest="jit_compile", action="store_false",
                     help="never use XLA")
    opt.add_argument("--sync_batch_norm", action="store_true",
                     help="batch-norm statistics over all replicas")
    opt.add_argument("--zero_init_residual", action="store_true",
                     help="zero the last batch-norm gamma of each residual block")
    opt.add_argument("--seed", type=int, default=None)
    run = parser.add_argument_group("distribution, checkpoints and output")
    run.add_argument("--distribution_strategy", "--ds", dest="ds", choices=STRATEGIES,
                     default=None, help="override the strategy chosen from TF_CONFIG and GPUs")
    run.add_argument("--cpu_replicas", type=positive_int, default=1,
                     help="split the CPU into N logical devices (mirrored on CPU-only hosts)")
    run.add_argument("--eval_every_epochs", type=positive_float, default=None,
                     help="evaluate on the validation split this often (default: at the end)")
    run.add_argument("--checkpoint_every_steps", type=positive_int, default=None,
                     help="also checkpoint every N steps (always at each epoch end)")
    run.add_argument("--keep_checkpoints", type=positive_int, default=3)
    run.add_argument("--data_threads", type=positive_int, default=None,
                     help="input pipeline threads (default: AUTOTUNE)")
    run.add_argument("--skip_corrupt", action="store_true",
                     help="drop records that fail to decode and count them")
    run.add_argument("--startup_timeout", type=positive_float,
                     default=float(os.environ.get("TFYARD_STARTUP_TIMEOUT", 600)),
                     help="seconds to wait for other cluster members before giving up "
                     "(env TFYARD_STARTUP_TIMEOUT; default: 600)")
    run.add_argument("--no_export", dest="export", action="store_false",
                     help="skip writing export/ at the end")
    run.add_argument("--quiet", action="store_true", help="no progress output")
    return parser


_FIELDS = {f.name for f in fields(TrainOptions)}


def options_from_args(args: argparse.Namespace) -> TrainOptions:
    """Build TrainOptions from parsed flags, resolving --resnet_size into a model name."""
    from tfyard.models import resolve_alias

    values = {k: v for k, v in vars(args).items() if k in _FIELDS and v is not None}
    dataset = values.get("dataset", TrainOptions.dataset)
    model = values.get("model")
    resnet_size = getattr(args, "resnet_size", None)
    if resnet_size is not None and model is None and dataset.startswith("cifar"):
        model = f"cifar_resnet{resnet_size}"
        resnet_size = None
    values["model"] = resolve_alias(model=model or (None if resnet_size else TrainOptions.model),
                                    resnet_size=resnet_size)
    return TrainOptions(**values)


def rename_flags(argv: list[str], renames: dict[str, str]) -> list[str]:
    """Rewrite a script's historical flag names (`--train_dir=X`) to tfyard's (`--output_dir=X`)."""
    out = []
    for arg in argv:
        head, sep, tail = arg.partition("=")
        out.append(renames.get(head, head) + sep + tail if head in renames else arg)
    return out


def parse_train_args(argv: list[str] | None, prog: str = "tfyard train") -> TrainOptions:
    """Parse a training command line (used by seed scripts and `tfyard.train.run`)."""
    from tfyard.cli import Parser

    parser = add_train_arguments(Parser(prog=prog, description="Train an image classifier."))
    return options_from_args(parser.parse_args(argv))


@dataclass(frozen=True)
class Resolved:
    """The concrete numbers a run uses, after recipe, batch and replica arithmetic."""

    global_batch: int
    per_replica_batch: int
    learning_rate: float
    optimizer: str
    lr_schedule: str
    decay_epochs: tuple[float, ...]
    warmup_epochs: float
    weight_decay: float
    steps_per_epoch: int
    total_steps: int


def resolve_numbers(options: TrainOptions, family: str, replicas: int,
                    train_examples: int) -> Resolved:
    """Apply the recipe, check the batch against the replicas, and count steps."""
    recipe = RECIPES[family]
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
    if options.train_steps is not None:
        total = options.train_steps
    else:
        total = max(1, round((options.epochs or recipe.epochs) * steps_per_epoch))
    lr = options.learning_rate or recipe.base_lr * global_batch / recipe.base_batch
    return Resolved(
        global_batch=global_batch,
        per_replica_batch=global_batch // replicas,
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
