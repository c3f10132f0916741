"""One GPU, measured (issues 54, 64, 65): the whole program on the device, then the figures.

Run on a machine with a GPU and `tensorflow[and-cuda]` (tfyard's `gpu` extra). In one run,
on one card, in this order (each stage bounded, every figure appended to OUT/gpu.jsonl as it
comes, so a run cut short keeps what it measured):
- the GPUs TensorFlow finds, with its loader lines (TF_CPP_MIN_LOG_LEVEL=0);
- the GPU test slice (`make gpu`), its tests side by side on the card;
- ImageNet-format shards of real JPEGs (500x375, ~60 KiB, ImageNet's mean size and shape),
  written here;
- `tfyard bench train` ResNet-50 in the settings not measured before: float32 with XLA, and
  bf16 without it, on those shards and on synthetic batches made on the device;
- the headline: bf16 with XLA on the shards and on synthetic batches, and a hand-written
  Keras `fit` of the same model on the same shards (decode_jpeg, resize, flip, batch,
  prefetch; mixed bf16, XLA);
- `tfyard bench data` (the input alone, on the machine's cores);
- float32 without XLA.
Ratios are within this run: real JPEGs / synthetic, tfyard / fit.

    python benchmarks/gpu.py --out OUT [--budget SECONDS] [--small]

`--small` is a CPU smoke test of the same stages at a toy size.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def photo(seed: int, height: int, width: int):
    """A photo-like JPEG's pixels: smooth colour fields and sensor-like grain, so the file
    size (~65 KiB at 500x375, quality 90) and the decoder's work are a photo's."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (height // 32 + 2, width // 32 + 2, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC))
    grain = rng.integers(-12, 13, (height, width, 3), dtype=np.int16)
    return np.clip(smooth + grain, 0, 255).astype(np.uint8)


def _write_shard(job) -> int:
    from tfyard.data.convert import Item, write_shard

    path, seeds, height, width = job
    write_shard(path, [Item(1 + seed % 1000, "class", pixels=photo(seed, height, width),
                            pixel_format="JPEG") for seed in seeds])
    return len(seeds)


def write_imagenet(root: str, train: int, validation: int, shards: int, height: int,
                   width: int) -> dict:
    """ImageNet-named JPEG shards (labels 1..1000) and a folder of the validation JPEGs."""
    jobs = [(os.path.join(root, f"train-{i:05d}-of-{shards:05d}"),
             range(i, train, shards), height, width) for i in range(shards)]
    jobs.append((os.path.join(root, "validation-00000-of-00001"),
                 range(train, train + validation), height, width))
    with multiprocessing.get_context("spawn").Pool(min(len(jobs), os.cpu_count())) as pool:
        pool.map(_write_shard, jobs)
    sizes = [os.path.getsize(job[0]) for job in jobs]
    return {"train_images": train, "validation_images": validation,
            "mean_record_kib": sum(sizes) / (train + validation) / 1024,
            "image": f"{width}x{height}"}


def user_input(root: str, batch: int, size: int):
    """The input a user writes for ImageNet JPEGs: decode, resize, flip, batch, prefetch."""
    import tensorflow as tf

    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        example = tf.io.parse_single_example(record, features)
        image = tf.image.resize(tf.io.decode_jpeg(example["image/encoded"], channels=3),
                                [size, size])
        image = tf.image.random_flip_left_right(image) / 127.5 - 1.0
        return image, tf.cast(example["image/class/label"], tf.int32) - 1

    files = tf.io.gfile.glob(os.path.join(root, "train-*"))
    return (tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
            .shuffle(1000).repeat().map(parse, tf.data.AUTOTUNE)
            .batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))


def fit_rate(root: str, model_name: str, batch: int, size: int, warmup: int, steps: int,
             chunk: int) -> dict:
    """Images/sec of a hand-written Keras `fit`: mixed bf16, XLA, epochs of `chunk` steps
    timed at their ends (epoch hooks only, so fit keeps its asynchronous dispatch)."""
    import keras

    from tfyard.models import create_model

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = create_model(model_name, 1000, (size, size, 3))
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    ends = []
    clock = keras.callbacks.LambdaCallback(on_epoch_end=lambda *_: ends.append(time.time()))
    model.fit(user_input(root, batch, size), epochs=(warmup + steps) // chunk,
              steps_per_epoch=chunk, verbose=0, callbacks=[clock])
    seconds = ends[-1] - ends[warmup // chunk - 1]
    return {"images_per_sec": batch * steps / seconds, "global_batch": batch,
            "dtype": "mixed_bfloat16", "jit_compile": True, "timed_steps": steps}


class Stages:
    """Runs each stage as a child process under the run's deadline; logs and figures to OUT."""

    def __init__(self, out: str, budget: float):
        self.out, self.deadline = out, time.time() + budget
        self.log = open(os.path.join(out, "gpu.log"), "a", buffering=1)

    def record(self, name: str, figures: dict) -> None:
        with open(os.path.join(self.out, "gpu.jsonl"), "a") as handle:
            handle.write(json.dumps({"stage": name, **figures}, sort_keys=True) + "\n")

    def run(self, name: str, argv: list[str], env: dict | None = None,
            limit: float = 300) -> tuple[int | None, str]:
        """(exit code or None when skipped or cut, stdout); the child's output to the log."""
        left = self.deadline - time.time()
        if left < 20:
            self.log.write(f"== {name}: skipped, {left:.0f} s left\n")
            return None, ""
        self.log.write(f"== {name}: {' '.join(argv)}\n")
        started = time.time()
        try:
            child = subprocess.run(argv, capture_output=True, text=True,
                                   timeout=min(limit, left), env={**os.environ, **(env or {})})
        except subprocess.TimeoutExpired as cut:
            self.log.write(f"{cut.stdout or ''}{cut.stderr or ''}\n== {name}: cut at "
                           f"{time.time() - started:.0f} s\n")
            return None, ""
        self.log.write(child.stdout[-20000:] + child.stderr[-20000:])
        self.log.write(f"\n== {name}: exit {child.returncode} in "
                       f"{time.time() - started:.1f} s\n")
        return child.returncode, child.stdout

    def figures(self, name: str, argv: list[str], **kwargs) -> dict | None:
        """A stage printing one JSON object last: recorded, with its wall time."""
        started = time.time()
        code, stdout = self.run(name, argv, **kwargs)
        if code != 0 or not stdout.strip():
            return None
        figures = json.loads(stdout.strip().splitlines()[-1])
        self.record(name, {**figures, "wall_s": round(time.time() - started, 1)})
        return figures


def bench_argv(args, data: str, dtype: str, xla: bool) -> list[str]:
    return [sys.executable, "-m", "tfyard", "bench", "train", "--model", args.model,
            "--dataset", "imagenet", "--data", data, "--batch_size", str(args.batch),
            "--dtype", dtype, "--xla" if xla else "--no_xla", "--steps", str(args.steps),
            "--warmup_steps", str(args.warmup), "--steps_per_loop", str(args.chunk),
            "--image_size", str(args.size), "--json"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="where gpu.log and gpu.jsonl go")
    parser.add_argument("--work", default=None, help="scratch (default: a temp dir)")
    parser.add_argument("--budget", type=float, default=540, help="seconds for every stage")
    parser.add_argument("--small", action="store_true", help="a CPU smoke test, toy sizes")
    parser.add_argument("--stages", default="all",
                        help="comma list: env,tests,data,matrix,headline,input (default all)")
    parser.add_argument("--fit", metavar="ROOT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    small = args.small
    args.model, args.size = ("resnet18", 32) if small else ("resnet50", 224)
    args.batch, args.steps, args.warmup = (4, 4, 2) if small else (256, 40, 20)
    args.chunk = chunk = 2 if small else 10
    if args.fit:   # the child that runs the hand-written fit
        print(json.dumps(fit_rate(args.fit, args.model, args.batch, args.size, args.warmup,
                                  args.steps, chunk)))
        return 0
    os.makedirs(args.out, exist_ok=True)
    work = args.work or tempfile.mkdtemp(prefix="tfyard-gpu-")
    data = os.path.join(work, "data")
    stages = Stages(args.out, args.budget)
    wanted = set(args.stages.split(",")) if args.stages != "all" else {
        "env", "tests", "data", "matrix", "headline", "input"}
    tfyard = [sys.executable, "-m", "tfyard"]

    if "env" in wanted:
        if shutil.which("nvidia-smi"):
            stages.run("nvidia-smi", ["nvidia-smi", "-L"])
        stages.figures("gpus", [sys.executable, "-c", (
            "import json, tensorflow as tf; g = tf.config.list_physical_devices('GPU'); "
            "print(json.dumps({'tensorflow': tf.__version__, 'gpus': [dict(name=d.name, **{"
            "k: str(v) for k, v in tf.config.experimental.get_device_details(d).items()}) "
            "for d in g], 'cuda': tf.sysconfig.get_build_info().get('cuda_version'), "
            "'cudnn': tf.sysconfig.get_build_info().get('cudnn_version')}))")],
            env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    if "tests" in wanted:   # side by side: each test's children keep to their own memory
        stages.run("make gpu", [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                                "-rA", "-n", "6", "-m", "gpu",
                                os.path.join(HERE, "..", "tests", "gpu")], limit=240)
    if "data" in wanted:
        started = time.time()
        counts = (64, 16, 2) if small else (4096, 512, 16)
        os.makedirs(data, exist_ok=True)
        figures = write_imagenet(data, *counts, *((96, 128) if small else (375, 500)))
        stages.record("data", {**figures, "wall_s": round(time.time() - started, 1)})
    if "matrix" in wanted:
        for dtype, xla in (("float32", True), ("bfloat16", False)):
            for data_name, source in (("synthetic", "synthetic"), ("jpeg", data)):
                stages.figures(f"bench train {data_name} {dtype} "
                               f"{'xla' if xla else 'no_xla'}",
                               bench_argv(args, source, dtype, xla))
    if "headline" in wanted:
        stages.figures("bench train jpeg bf16 xla", bench_argv(args, data, "bfloat16", True))
        stages.figures("bench train synthetic bf16 xla",
                       bench_argv(args, "synthetic", "bfloat16", True))
        stages.figures("fit jpeg mixed_bf16 xla",
                       [sys.executable, os.path.abspath(__file__), "--out", args.out,
                        "--fit", data] + (["--small"] if small else []))
    if "input" in wanted:
        for dtype in ("bfloat16", "float32"):
            stages.figures(f"bench data {dtype}", tfyard + [
                "bench", "data", "--dataset", "imagenet", "--data_dir", data, "--batch_size",
                str(args.batch), "--image_size", str(args.size), "--dtype", dtype, "--json"])
    if "matrix" in wanted:
        for data_name, source in (("synthetic", "synthetic"), ("jpeg", data)):
            stages.figures(f"bench train {data_name} float32 no_xla",
                           bench_argv(args, source, "float32", False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
