"""Training loop throughput: tfyard's loop vs Keras `model.fit`, same model, data, optimizer.

Synthetic batches made once on the device (input costs ~nothing, the loop itself is
measured), SGD momentum 0.9, no weight decay. Two models: CIFAR ResNet-20 (a long,
compute-bound step) and the MNIST MLP (a short step, where the host's per-call overhead
shows, as it does for any model on a fast GPU).

All runs share one process and take turns: Keras `model.fit` at its defaults (which on a
CPU-only machine means no XLA) runs its epochs of `--window` steps, and after each epoch a
callback runs the same number of steps through each rival: `fit` with `jit_compile=True`
(steps_per_execution 1, as the defaults), and tfyard's `Trainer` (the real one `tfyard train`
drives; XLA on where safe, its default) with `--steps_per_loop 1` and at its default. A
neighbour's burst therefore hits every side alike; each ratio is the median of the
per-window ratios against the fit window just before. Then the cost of the CIFAR
recipe's weight decay (2e-4, a fused gradient term): two Trainers, with and without decay,
in alternating windows; the cost is the median step-time ratio minus 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

from tfyard.bench.train import prepare_member  # noqa: E402
from tfyard.data import build_dataset  # noqa: E402
from tfyard.models import create_model  # noqa: E402
from tfyard.train.options import TrainOptions  # noqa: E402

MODELS = {"cifar_resnet20": 32, "mnist_mlp": 28}  # model: image size
DEFAULT_STEPS_PER_LOOP = TrainOptions().steps_per_loop


def trainer(args, model: str, steps_per_loop: int, weight_decay: float = 0.0):
    options = TrainOptions(model=model, dataset="synthetic", image_size=MODELS[model],
                           batch_size=args.batch_size, steps_per_loop=steps_per_loop,
                           learning_rate=0.1, weight_decay=weight_decay, export=False)
    return prepare_member(options)[0].trainer


def window_seconds(run, steps: int) -> float:
    """Wall time of `steps` steps in the chunks `tfyard train` would run them."""
    started, done = time.perf_counter(), 0
    while done < steps:
        n = run.chunk_steps(steps - done)
        run.train(n)
        done += n
    return time.perf_counter() - started


class _TakeTurns(keras.callbacks.Callback):
    """Times each fit epoch (one window) and, after it, each rival's window."""

    def __init__(self, rivals: dict):
        super().__init__()
        self.rivals = rivals
        self.seconds = {"fit": [], **{name: [] for name in rivals}}

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds["fit"].append(time.perf_counter() - self.started)
        for name, run in self.rivals.items():
            self.seconds[name].append(run())


def keras_model(model: str, jit_compile="auto"):
    size = MODELS[model]
    built = create_model(model, 1000, (size, size, 3))
    built.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(5)],
                  jit_compile=jit_compile)
    return built


def fit_window(model, data, steps: int) -> float:
    """One more one-epoch `fit` of `steps` steps; only the epoch is timed, not fit's set-up."""
    timer = _TakeTurns({})
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[timer])
    return timer.seconds["fit"][0]


def compare(args, model: str) -> dict[str, list[float]]:
    """Seconds per window of fit and of each rival, warm-up windows dropped."""
    data = build_dataset("synthetic", "train", batch_size=args.batch_size,
                         image_size=MODELS[model])
    with_xla = keras_model(model, jit_compile=True)
    rivals = {"fit_xla": lambda: fit_window(with_xla, data, args.window)}
    for n in (1, DEFAULT_STEPS_PER_LOOP):
        loop = trainer(args, model, n)
        rivals[f"tfyard({n})"] = lambda loop=loop: window_seconds(loop, args.window)
    turns = _TakeTurns(rivals)
    keras_model(model).fit(data, epochs=args.warmup_windows + args.windows,
                           steps_per_epoch=args.window, verbose=0, callbacks=[turns])
    return {name: seconds[args.warmup_windows:] for name, seconds in turns.seconds.items()}


LABELS = {"fit": "keras fit, defaults", "fit_xla": "keras fit, jit_compile=True"}


def ratio(seconds: dict[str, list[float]], name: str, base: str) -> float:
    """Median over windows of base's time / name's time (> 1: name is faster)."""
    return statistics.median(b / t for b, t in zip(seconds[base], seconds[name], strict=True))


def report(args, model: str, seconds: dict[str, list[float]]) -> None:
    images = args.window * args.batch_size
    print(f"{model} {MODELS[model]}px, batch {args.batch_size}, {len(seconds['fit'])} windows "
          f"of {args.window} steps after {args.warmup_windows}:")
    for name, times in seconds.items():
        line = f"  {LABELS.get(name, name + ' loop'):<30} {images / statistics.median(times):8.1f}"
        line += " images/sec"
        for base in ("fit", "fit_xla"):
            if name.startswith("tfyard") or (name, base) == ("fit_xla", "fit"):
                line += f"   {ratio(seconds, name, base):.2f}x {LABELS[base]}"
        print(line)


def decay_cost(args, weight_decay: float = 2e-4) -> float:
    """Median over paired windows of (step time with decay / without) - 1."""
    model, n = "cifar_resnet20", DEFAULT_STEPS_PER_LOOP
    plain, decayed = trainer(args, model, n), trainer(args, model, n, weight_decay)
    ratios = []
    for window in range(args.warmup_windows + args.windows):
        base = window_seconds(plain, args.window)
        ratio = window_seconds(decayed, args.window) / base
        if window >= args.warmup_windows:
            ratios.append(ratio)
    return statistics.median(ratios) - 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--window", type=int, default=20, help="steps per timed window")
    parser.add_argument("--windows", type=int, default=8, help="timed windows per model")
    parser.add_argument("--warmup_windows", type=int, default=2)
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--decay_only", action="store_true",
                        help="measure only the weight-decay cost")
    args = parser.parse_args()
    if args.window % DEFAULT_STEPS_PER_LOOP:
        parser.error(f"--window must be a multiple of {DEFAULT_STEPS_PER_LOOP}")
    print(f"cpus: {os.cpu_count()}")
    if not args.decay_only:
        for model in args.models:
            report(args, model, compare(args, model))
    print(f"weight decay 2e-4 cost: {decay_cost(args):+.1%} of step time (median of "
          f"{args.windows} paired windows, cifar_resnet20)")


if __name__ == "__main__":
    main()
