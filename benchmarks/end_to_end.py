"""End to end: the whole `tfyard train` command against a hand-written Keras `fit` script, on
the same files and model (issue 24).

Each side is one whole run in a fresh process, as a user runs it (process-wide settings,
such as tfyard's malloc settings, `train.host_memory`, or TensorFlow's thread pools, must not
carry over from one side to the next), and the sides take turns, round after round, in an
order rotated each round, so a neighbour's burst on this shared machine hits them alike:
- `tfyard`: `tfyard train` itself (`tfyard.train.job.run`): the reader, the pipeline, the
  Trainer and the Controller with every action (checkpoints, metrics files, TensorBoard,
  console, evaluation and export at the end), recipe defaults; and with XLA forced on and
  off (`--xla`, `--no_xla`);
- `tfyard synthetic`: the same command on `synthetic_<dataset>` batches made on the device,
  so the difference to `tfyard` is what the input costs;
- `fit`: the script a user writes by hand: `tf.data` from the files with `.cache()` and the
  same augmentation, `model.compile(SGD momentum)`, `model.fit` at Keras' defaults (XLA off
  on a CPU-only machine) and with `jit_compile=True`.

Every side times the same steps, `--warmup_steps` + 1 to `--warmup_steps` + `--steps`, as
wall time between two points of the real run: tfyard's metrics.jsonl report times (written
after each chunk's actions), fit's epoch ends (epochs of `--steps_per_loop` steps, so fit
keeps its asynchronous dispatch). The window holds no epoch end of tfyard's run, and no
evaluation. Ratios are medians over rounds of the ratio within a round.
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
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from input_pipeline import write_data as write_jpeg_shards  # noqa: E402
from train_step import ratio  # noqa: E402

from tfyard.data import preprocess  # noqa: E402
from tfyard.data.convert import Item, write_shard  # noqa: E402
from tfyard.data.formats.synthetic import twin  # noqa: E402
from tfyard.models import create_model  # noqa: E402
from tfyard.train.job import run as tfyard_train  # noqa: E402

# case -> model, dataset, image side, classes, default batch, training images written
CASES = {
    "cifar": ("cifar_resnet20", "cifar10", 32, 10, 64, 5000),
    "imagenet": ("resnet50", "imagenet", 224, 1000, 8, 256),
}
SIDES = ("tfyard", "tfyard --xla", "tfyard --no_xla", "tfyard synthetic", "fit",
         "fit jit_compile=True")


def write_cifar(root: str, images: int) -> None:
    """CIFAR-10 binary batches: `data_batch_1.bin` of `images` records, a 1,000-record
    `test_batch.bin`; smooth random pixels, labels 0-9."""
    rng = np.random.RandomState(0)
    for name, count in (("data_batch_1.bin", images), ("test_batch.bin", 1000)):
        small = rng.randint(0, 256, (count, 3, 8, 8)).astype(np.uint8)
        pixels = np.kron(small, np.ones((1, 1, 4, 4), np.uint8)).reshape(count, -1)
        labels = rng.randint(0, 10, (count, 1)).astype(np.uint8)
        np.concatenate([labels, pixels], axis=1).tofile(os.path.join(root, name))


def write_imagenet(root: str, images: int) -> None:
    """ImageNet-named JPEG TFRecords (~400x350 photos-like), 8 train and 1 validation shard."""
    write_jpeg_shards(root, images, 8)
    rng = np.random.RandomState(1)
    write_shard(os.path.join(root, "validation-00000-of-00001"), [
        Item(int(rng.randint(1, 1001)), "class", pixels=rng.randint(
            0, 256, (350, 400, 3)).astype(np.uint8), pixel_format="JPEG") for _ in range(16)])


def cifar_input(root: str, batch: int):
    """A user's CIFAR input: parse, cache, shuffle, pad-crop-flip, normalise, batch."""
    mean, std = preprocess.CIFAR_STATS

    def parse(record):
        raw = tf.io.decode_raw(record, tf.uint8)
        return tf.transpose(tf.reshape(raw[1:], [3, 32, 32]), [1, 2, 0]), tf.cast(raw[0],
                                                                                 tf.int32)

    def augment(image, label):
        image = tf.image.resize_with_crop_or_pad(image, 40, 40)
        image = tf.image.random_flip_left_right(tf.image.random_crop(image, [32, 32, 3]))
        return (tf.cast(image, tf.float32) - mean) / std, label

    files = [os.path.join(root, "data_batch_1.bin")]
    return (tf.data.FixedLengthRecordDataset(files, 3073).map(parse, tf.data.AUTOTUNE).cache()
            .shuffle(10_000).repeat().map(augment, tf.data.AUTOTUNE)
            .batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))


def imagenet_input(root: str, batch: int):
    """A user's ImageNet input: decode the JPEG, resize to 256, random crop and flip."""
    mean, std = preprocess.IMAGENET_STATS
    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        image = tf.image.resize(tf.io.decode_jpeg(example["image/encoded"], channels=3),
                                [256, 256])
        image = tf.image.random_flip_left_right(tf.image.random_crop(image, [224, 224, 3]))
        return (image - mean) / std, tf.cast(example["image/class/label"], tf.int32) - 1

    files = tf.io.gfile.glob(os.path.join(root, "train-*"))
    return (tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE).shuffle(1000)
            .repeat().map(parse, tf.data.AUTOTUNE).batch(batch, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE))


class _EpochClock(keras.callbacks.Callback):
    """The time at each epoch end (epoch hooks only: fit keeps its asynchronous dispatch)."""

    def __init__(self):
        super().__init__()
        self.ends = []

    def on_epoch_end(self, epoch, logs=None):
        self.ends.append(time.perf_counter())


def fit_seconds(args, root: str, jit_compile) -> float:
    """The hand-written script's `fit`; seconds of the timed steps."""
    model_name, _, side, classes = CASES[args.case][:4]
    data = (cifar_input if args.case == "cifar" else imagenet_input)(root, args.batch_size)
    model = create_model(model_name, classes, (side, side, 3))
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=jit_compile)
    clock = _EpochClock()
    chunk = args.steps_per_loop
    model.fit(data, epochs=(args.warmup_steps + args.steps) // chunk, steps_per_epoch=chunk,
              verbose=0, callbacks=[clock])
    return clock.ends[-1] - clock.ends[args.warmup_steps // chunk - 1]


def tfyard_seconds(args, root: str, output_dir: str, synthetic: bool, flags: list) -> float:
    """`tfyard train` itself; seconds between its reports at the window's two ends."""
    model, dataset = CASES[args.case][:2]
    argv = ["--model", model, "--output_dir", output_dir, "--batch_size", str(args.batch_size),
            "--train_steps", str(args.warmup_steps + args.steps),
            "--steps_per_loop", str(args.steps_per_loop), "--quiet"]
    if synthetic:
        argv += ["--dataset", twin(dataset)]
    else:
        argv += ["--dataset", dataset, "--data_dir", root]
    assert tfyard_train(argv + flags) == 0
    with open(os.path.join(output_dir, "metrics.jsonl")) as handle:
        times = {r["step"]: r["time"] for r in map(json.loads, handle) if r["kind"] == "train"}
    return times[args.warmup_steps + args.steps] - times[args.warmup_steps]


def run_side(args, side: str, root: str, output_dir: str) -> float:
    if side.startswith("fit"):
        return fit_seconds(args, root, True if "jit" in side else "auto")
    return tfyard_seconds(args, root, output_dir, "synthetic" in side,
                          [flag for flag in side.split() if flag.startswith("--")])


def run_child(args, side: str, root: str, output_dir: str) -> float:
    """Seconds of the timed steps of `side`, run by this script in a fresh process."""
    argv = [sys.executable, os.path.abspath(__file__), "--case", args.case, "--side", side,
            "--root", root, "--output_dir", output_dir]
    for name in ("batch_size", "images", "warmup_steps", "steps", "steps_per_loop"):
        argv += [f"--{name}", str(getattr(args, name))]
    child = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(child.stdout.splitlines()[-1])["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--case", choices=sorted(CASES), default="cifar")
    parser.add_argument("--batch_size", type=int, help="default: the case's (64 CIFAR, 8 "
                        "ImageNet)")
    parser.add_argument("--images", type=int, help="training images written (default: the "
                        "case's)")
    parser.add_argument("--warmup_steps", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60, help="timed steps per run")
    parser.add_argument("--steps_per_loop", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # one run, a child
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--output_dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    model, dataset, side, _, batch, images = CASES[args.case]
    args.batch_size = args.batch_size or batch
    args.images = args.images or images
    if args.side:
        with contextlib.redirect_stdout(sys.stderr):
            seconds = run_side(args, args.side, args.root, args.output_dir)
        print(json.dumps({"seconds": seconds}))
        return
    if args.warmup_steps % args.steps_per_loop or args.steps % args.steps_per_loop \
            or args.warmup_steps < args.steps_per_loop:
        parser.error("--warmup_steps and --steps: multiples of --steps_per_loop, warm-up >= 1 "
                     "chunk")
    if args.warmup_steps + args.steps >= args.images // args.batch_size:
        parser.error("the window must end before tfyard's first epoch end: write more --images")
    print(f"cpus: {os.cpu_count()}; {model} on {dataset} {side}px, batch {args.batch_size}, "
          f"{args.images} training images; {args.steps} timed steps after "
          f"{args.warmup_steps}, {args.rounds} rounds", flush=True)
    seconds = {name: [] for name in args.sides}
    root = tempfile.mkdtemp(prefix="tfyard-e2e-")
    try:
        (write_cifar if args.case == "cifar" else write_imagenet)(root, args.images)
        for round_ in range(args.rounds):
            turn = args.sides[round_ % len(args.sides):] + args.sides[:round_ % len(args.sides)]
            for name in turn:
                output_dir = os.path.join(root, "runs", f"{name.replace(' ', '_')}-{round_}")
                seconds[name].append(run_child(args, name, root, output_dir))
                print(f"  round {round_ + 1}: {name:<28} "
                      f"{args.steps * args.batch_size / seconds[name][-1]:8.1f} images/sec",
                      flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(args, seconds)


# (side, baseline) pairs reported, when both ran; the targets in brackets
# (side, baseline, target) reported when both ran
RATIOS = (("tfyard", "fit", ">= 1.2"), ("tfyard", "fit jit_compile=True", ">= 1.0"),
          ("tfyard", "tfyard synthetic", ">= 0.95"),
          ("tfyard --xla", "fit jit_compile=True", None), ("tfyard --no_xla", "fit", None),
          ("tfyard --xla", "tfyard --no_xla", None), ("fit jit_compile=True", "fit", None))


def report(args, seconds: dict[str, list[float]]) -> None:
    images = args.steps * args.batch_size
    print("median images/sec:")
    for name, times in seconds.items():
        print(f"  {name:<28} {images / statistics.median(times):8.1f}")
    print("ratios (median over rounds of the ratio within a round; > 1: faster):")
    for name, base, target in RATIOS:
        if name in seconds and base in seconds:
            print(f"  {name:<28} / {base:<28} {ratio(seconds, name, base):5.2f}x"
                  + (f"  (target {target})" if target else ""))


if __name__ == "__main__":
    main()
