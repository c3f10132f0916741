"""Fine-tuning (issue 30): what starting from trained weights buys, and what a frozen body
saves.

1. Transfer: a small convnet (`convnet` below) trained by `tfyard.fit` on scikit-learn's
   handwritten digits 0-4 (8x8, 601 images; `--pretrain_on most`: every 0-4 image and half of
   the 5-9 ones, 10 classes), then trained on digits 5-9 from only `--shots` examples per class
   (drawn from the 5-9 images not pretrained on) for `--steps` steps: fine-tuned
   (`init_checkpoint=` the first run's directory, `init_fresh_head=True`: a fresh 5-way head)
   with the whole network training and with `train_head_only=True`, against the same model from
   scratch on the same few examples, steps, batches and seed. Each side runs at every rate of
   `--lrs` (the best rate differs: a pretrained body wants a lower one than random weights), so
   the comparison is reported both at the same rate and at each side's best. Top-1 on the
   held-out 5-9 images (never trained on), from each run's own end-of-training evaluation.
   Every run is one `tfyard.fit` in a fresh process (this script as a child), so nothing
   carries over between runs; the few-shot draw, the initialisation and the shuffle follow each
   of `--seeds`; figures are medians over seeds. Target: fine-tuned clearly above scratch.
2. Speed: the ResNet-20 step of `tfyard train --train_head_only` (`cifar_resnet20`,
   synthetic CIFAR-10 batches made on the device, batch 64) against the full step: the two
   Trainers `tfyard train` would build (`bench.train.prepare_member`, recipe defaults, XLA as
   tfyard chooses it for this machine) take turns in windows of `--window` steps in one
   process, the order swapped every window, so a neighbour's burst on this shared machine
   hits both; images/sec are medians over windows, the ratio the median of the per-window
   ratios. Target >= 2x. `--no_xla` measures the pair with XLA off too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from train_step import window_seconds  # noqa: E402

HERE = os.path.abspath(__file__)
SIDES = ("scratch", "fine_tune", "head_only")
LABELS = {"scratch": "from scratch", "fine_tune": "fine-tuned, whole network",
          "head_only": "fine-tuned, head only (body frozen)"}


# --- 1. transfer --------------------------------------------------------------------------

def convnet(num_classes, input_shape):
    """A small convnet for 8x8 digits: three conv + batch-norm blocks, then the head."""
    import keras
    from keras import layers

    inputs = keras.Input(input_shape)
    x = inputs
    for i, (filters, pool) in enumerate(((32, False), (64, True), (64, False)), 1):
        x = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"conv{i}")(x)
        x = layers.BatchNormalization(momentum=0.9, name=f"bn{i}")(x)
        x = layers.ReLU(name=f"relu{i}")(x)
        if pool:
            x = layers.MaxPooling2D(name=f"pool{i}")(x)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    return keras.Model(inputs, layers.Dense(num_classes, name="logits")(x), name="convnet")


def digit_splits(shots: int, seed: int, pretrain_on: str = "0-4"):
    """(pretrain, few-shot, held-out) as (images NHWC float32 in [0, 1], labels). The new
    task is digits 5-9 (labels 5-9 -> 0-4): `shots` examples per class drawn with `seed`,
    held out: the other 5-9 examples not pretrained on. Pretraining (`pretrain_on`): "0-4",
    digits 0-4 only, 300 of them left out (unused); "most", every 0-4 digit and half of the
    5-9 ones, labels 0-9 (the new examples are drawn from the other half)."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images[..., None] / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int32)
    order = np.random.RandomState(0).permutation(len(labels))
    images, labels = images[order], labels[order]
    old = labels < 5
    new_images, new_labels = images[~old], labels[~old] - 5
    if pretrain_on == "most":
        half = len(new_labels) // 2
        pretrain = (np.concatenate([images[old], new_images[:half]]),
                    np.concatenate([labels[old], new_labels[:half] + 5]))
        new_images, new_labels = new_images[half:], new_labels[half:]
    else:
        pretrain = images[old][300:], labels[old][300:]
    draw = np.random.RandomState(seed)
    few = np.concatenate([draw.permutation(np.flatnonzero(new_labels == c))[:shots]
                          for c in range(5)])
    rest = np.setdiff1d(np.arange(len(new_labels)), few)
    return pretrain, (new_images[few], new_labels[few]), (new_images[rest], new_labels[rest])


def transfer_run(args) -> dict:
    """One `tfyard.fit` run (a child process) of `args.side`; its summary's figures."""
    import tensorflow as tf

    import tfyard

    pretrain, few, held_out = digit_splits(args.shots, args.seed, args.pretrain_on)
    train_set = pretrain if args.side == "pretrain" else few

    def train_fn(context=None):
        batch = context.get_per_replica_batch_size(args.batch_size) if context else \
            args.batch_size
        return (tf.data.Dataset.from_tensor_slices(train_set)
                .shuffle(len(train_set[1]), seed=args.seed).repeat().batch(batch))

    def eval_fn(context=None):
        return tf.data.Dataset.from_tensor_slices(held_out).batch(100)

    options = dict(output_dir=os.path.join(args.root, f"{args.side}-{args.seed}-{args.lr}"),
                   train_steps=args.pretrain_steps if args.side == "pretrain" else args.steps,
                   batch_size=args.batch_size, seed=args.seed, learning_rate=args.lr,
                   steps_per_loop=10, export=False, quiet=True)
    if args.side in ("fine_tune", "head_only"):
        options.update(init_checkpoint=os.path.join(args.root, PRETRAINED),
                       init_fresh_head=True, train_head_only=args.side == "head_only")
    summary = tfyard.fit(convnet, train_fn,
                         eval_data=None if args.side == "pretrain" else eval_fn,
                         num_classes=len(set(train_set[1].tolist())), **options)
    return {"eval": summary.get("eval"), "train": summary.get("train")}


PRETRAINED = "pretrain-0-0.1"  # the pretraining run's directory (seed 0, lr 0.1)


def run_child(args, side: str, seed: int, lr: float) -> dict:
    argv = [sys.executable, HERE, "--side", side, "--root", args.root, "--seed", str(seed),
            "--lr", str(lr)]
    for name in ("shots", "steps", "pretrain_steps", "batch_size", "pretrain_on"):
        argv += [f"--{name}", str(getattr(args, name))]
    child = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(child.stdout.splitlines()[-1])


def transfer(args) -> None:
    args.root = tempfile.mkdtemp(prefix="tfyard-ft-")
    pretrain, few, held_out = digit_splits(args.shots, 0, args.pretrain_on)
    task = "0-4" if args.pretrain_on == "0-4" else "0-4 and half the 5-9 images, 10 classes"
    print(f"transfer: digits 8x8, pretrained on {task} ({len(pretrain[1])} images, "
          f"{args.pretrain_steps} steps, lr 0.1), then 5-9 from {args.shots} per class "
          f"({len(few[1])} images), {args.steps} steps of batch {args.batch_size}, each side "
          f"at lr {', '.join(map(str, args.lrs))}; top-1 on the {len(held_out[1])} held-out "
          "5-9 images; the few-shot draw, init and shuffle follow the seed", flush=True)
    top1 = {(side, lr): [] for side in SIDES for lr in args.lrs}
    try:
        run_child(args, "pretrain", 0, 0.1)
        for seed in args.seeds:
            for side in SIDES:
                for lr in args.lrs:
                    top1[side, lr].append(run_child(args, side, seed, lr)["eval"]["top1"])
            print(f"  seed {seed}: " + "; ".join(
                f"{side} " + " ".join(f"{top1[side, lr][-1]:.3f}" for lr in args.lrs)
                for side in SIDES), flush=True)
    finally:
        shutil.rmtree(args.root, ignore_errors=True)
    print(f"  median top-1 over {len(args.seeds)} seeds, by learning rate, and at each side's "
          "best rate per seed (chosen on the held-out set, alike for every side):")
    print(f"    {'':<36}" + "".join(f"{'lr ' + str(lr):>9}" for lr in args.lrs)
          + f"{'best':>9}")
    best = {side: statistics.median(max(top1[side, lr][i] for lr in args.lrs)
                                    for i in range(len(args.seeds))) for side in SIDES}
    for side in SIDES:
        print(f"    {LABELS[side]:<36}" + "".join(f"{statistics.median(top1[side, lr]):9.3f}"
                                                  for lr in args.lrs) + f"{best[side]:9.3f}")
    for side in SIDES[1:]:
        same = [statistics.median(top1[side, lr]) - statistics.median(top1["scratch", lr])
                for lr in args.lrs]
        print(f"    {LABELS[side]} - scratch: {100 * (best[side] - best['scratch']):+.1f} "
              f"points at the best rates; {100 * min(same):+.1f} to {100 * max(same):+.1f} at "
              "the same rate", flush=True)


# --- 2. speed -----------------------------------------------------------------------------

def trainer(args, head_only: bool, jit_compile):
    from tfyard.bench.train import prepare_member
    from tfyard.train.options import TrainOptions

    options = TrainOptions(model="cifar_resnet20", dataset="synthetic_cifar10",
                           batch_size=args.speed_batch, train_head_only=head_only,
                           jit_compile=jit_compile, export=False, num_gpus="0")
    run = prepare_member(options)[0].trainer
    return run, len(run.model.trainable_variables), run.config.jit_compile


def speed(args, jit_compile) -> None:
    full, full_weights, xla = trainer(args, False, jit_compile)
    head, head_weights, _ = trainer(args, True, jit_compile)
    seconds = {"full": [], "head": []}
    for window in range(args.warmup_windows + args.windows):
        order = (("full", full), ("head", head)) if window % 2 else (("head", head),
                                                                      ("full", full))
        taken = {name: window_seconds(run, args.window) for name, run in order}
        if window >= args.warmup_windows:
            for name in seconds:
                seconds[name].append(taken[name])
    images = args.window * args.speed_batch
    ratios = [f / h for f, h in zip(seconds["full"], seconds["head"], strict=True)]
    print(f"speed: cifar_resnet20 32px, batch {args.speed_batch}, XLA {'on' if xla else 'off'}, "
          f"{args.windows} windows of {args.window} steps after {args.warmup_windows}:")
    print(f"  full step ({full_weights} trainable weights)  "
          f"{images / statistics.median(seconds['full']):7.1f} images/sec")
    print(f"  head only ({head_weights} trainable weights)    "
          f"{images / statistics.median(seconds['head']):7.1f} images/sec   "
          f"{statistics.median(ratios):.2f}x full (target >= 2x; windows "
          f"{min(ratios):.2f}-{max(ratios):.2f}x)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--parts", nargs="+", choices=("transfer", "speed"),
                        default=["transfer", "speed"])
    group = parser.add_argument_group("transfer")
    group.add_argument("--shots", type=int, default=5, help="examples per new class")
    group.add_argument("--steps", type=int, default=30, help="fine-tune / scratch steps")
    group.add_argument("--pretrain_steps", type=int, default=300)
    group.add_argument("--pretrain_on", choices=("0-4", "most"), default="0-4",
                       help="digits 0-4 only, or most of the data (0-4 and half of 5-9)")
    group.add_argument("--batch_size", type=int, default=25)
    group.add_argument("--lrs", type=float, nargs="+", default=[0.05, 0.2, 0.4],
                       help="learning rates each side is run at")
    group.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    group = parser.add_argument_group("speed")
    group.add_argument("--speed_batch", type=int, default=64)
    group.add_argument("--window", type=int, default=10, help="steps per timed window")
    group.add_argument("--windows", type=int, default=6)
    group.add_argument("--warmup_windows", type=int, default=2)
    group.add_argument("--no_xla", action="store_true",
                       help="also measure the pair with XLA off")
    parser.add_argument("--side", choices=("pretrain", *SIDES), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--lr", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # one transfer run, as a child
        with contextlib.redirect_stdout(sys.stderr):
            figures = transfer_run(args)
        print(json.dumps(figures))
        return
    print(f"cpus: {os.cpu_count()}", flush=True)
    if "transfer" in args.parts:
        transfer(args)
    if "speed" in args.parts:
        speed(args, None)
        if args.no_xla:
            speed(args, False)


if __name__ == "__main__":
    main()
