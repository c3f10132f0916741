"""Training loop throughput: tfyard's loop vs Keras `model.fit`, same model, data, optimizer.

CIFAR ResNet-20 on synthetic 32x32 batches (made once on the device, so input costs
~nothing and the loop itself is measured), SGD momentum 0.9, no weight decay:
Keras 3 `model.fit` with steps_per_execution 1 (its default) and N, and tfyard's loop
(`tfyard.bench.train.measure`, the real Trainer) with --steps_per_loop 1 and N. Then the
cost of the CIFAR recipe's weight decay (2e-4, a fused gradient term): two Trainers in one
process, with and without decay, timed in alternating windows so a neighbour's burst hits
both alike; the cost is the median of the paired step-time ratios, minus 1. Each
figure is a median of windows after warm-up; the runs are interleaved over --rounds so
a noisy neighbour hits them alike, and the best round of each is kept.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

from tfyard.bench.train import measure, prepare_member, steady_windows  # noqa: E402
from tfyard.data import build_dataset  # noqa: E402
from tfyard.models import create_model  # noqa: E402
from tfyard.train.options import TrainOptions  # noqa: E402

MODEL = "cifar_resnet20"


class _WindowTimer(keras.callbacks.Callback):
    """Seconds per epoch; each epoch is one window of `steps_per_epoch` steps."""

    def __init__(self):
        super().__init__()
        self.seconds: list[float] = []

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self.started)


def keras_fit(args, steps_per_execution: int) -> float:
    model = create_model(MODEL, 1000, (args.image_size, args.image_size, 3))
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(5)],
                  steps_per_execution=steps_per_execution)
    data = build_dataset("synthetic", "train", batch_size=args.batch_size,
                         image_size=args.image_size)
    timer = _WindowTimer()
    model.fit(data, epochs=args.warmup_windows + args.windows, steps_per_epoch=args.window,
              verbose=0, callbacks=[timer])
    rates = [args.window * args.batch_size / s for s in timer.seconds]
    return statistics.median(steady_windows(rates, args.warmup_windows))


def tfyard_loop(args, steps_per_loop: int) -> float:
    """Windows of `args.window` steps, whatever the steps per call, like the fit runs."""
    options = TrainOptions(model=MODEL, dataset="synthetic", image_size=args.image_size,
                           batch_size=args.batch_size, train_steps=args.windows * args.window,
                           steps_per_loop=steps_per_loop, learning_rate=0.1,
                           weight_decay=0.0, export=False)
    rates = measure(options, warmup_steps=args.warmup_windows * args.window)[
        "window_images_per_sec"]
    calls = args.window // steps_per_loop  # calls per window; each call is one rate
    images = steps_per_loop * args.batch_size
    seconds = [sum(images / r for r in rates[i:i + calls]) for i in range(0, len(rates), calls)]
    return statistics.median(args.window * args.batch_size / s for s in seconds)


def decay_cost(args, weight_decay: float = 2e-4) -> float:
    """Median over paired windows of (step time with decay / without) - 1."""
    def trainer(decay):
        options = TrainOptions(model=MODEL, dataset="synthetic", image_size=args.image_size,
                               batch_size=args.batch_size, steps_per_loop=args.window,
                               learning_rate=0.1, weight_decay=decay, export=False)
        return prepare_member(options)[0].trainer

    plain, decayed = trainer(0.0), trainer(weight_decay)
    for _ in range(args.warmup_windows):
        plain.train(args.window)
        decayed.train(args.window)
    ratios = []
    for _ in range(args.windows * args.rounds):
        base = plain.train(args.window)["step_time"]
        ratios.append(decayed.train(args.window)["step_time"] / base)
    return statistics.median(ratios) - 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--image_size", type=int, default=32)
    parser.add_argument("--window", type=int, default=10, help="N: steps per window/call")
    parser.add_argument("--windows", type=int, default=5, help="timed windows per run")
    parser.add_argument("--warmup_windows", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--decay_only", action="store_true",
                        help="measure only the weight-decay cost")
    args = parser.parse_args()
    n = args.window
    runs = {
        "fit1": ("keras fit, steps_per_execution=1", lambda: keras_fit(args, 1)),
        "loop1": ("tfyard loop, steps_per_loop=1", lambda: tfyard_loop(args, 1)),
        "fitN": (f"keras fit, steps_per_execution={n}", lambda: keras_fit(args, n)),
        "loopN": (f"tfyard loop, steps_per_loop={n}", lambda: tfyard_loop(args, n)),
    }
    if args.decay_only:
        print(f"weight decay 2e-4 cost: {decay_cost(args):+.1%} of step time")
        return
    best = dict.fromkeys(runs, 0.0)
    for _ in range(args.rounds):
        for key, (_, run) in runs.items():
            best[key] = max(best[key], run())
    print(f"cpus: {os.cpu_count()}  model: {MODEL} {args.image_size}px  batch: "
          f"{args.batch_size}  windows: {args.windows} x {n} steps after {args.warmup_windows}")
    for key, (name, _) in runs.items():
        print(f"{name:<38} {best[key]:8.1f} images/sec")
    print(f"ratio tfyard(1)/fit(1):   {best['loop1'] / best['fit1']:.2f}x")
    print(f"ratio tfyard({n})/fit(1):  {best['loopN'] / best['fit1']:.2f}x")
    print(f"ratio tfyard({n})/fit({n}): {best['loopN'] / best['fitN']:.2f}x")
    cost = decay_cost(args)
    print(f"weight decay 2e-4 cost:   {cost:+.1%} of step time (median of "
          f"{args.windows * args.rounds} paired windows)")

if __name__ == "__main__":
    main()
