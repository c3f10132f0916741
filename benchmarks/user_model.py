"""The user's own model through tfyard (issue 21): at par with the registry, and faster than
Keras `fit` for a compiled model.

1. The same CIFAR ResNet-20 by its registry name and through `--model MODULE:FUNCTION` (a
   function in this file that builds it): the two Trainers `tfyard train` would build take
   turns in windows; target >= 0.98x.
2. A compiled ResNet-20 (SGD momentum, sparse cross-entropy, accuracy) trained as compiled by
   tfyard (the path `tfyard.fit` takes: its optimizer, loss and metrics in tfyard's loop)
   against the same compiled model's `fit`, with the same XLA setting on each side, taking
   turns after every fit epoch as `train_step.py` does; target >= 1.0x.

Synthetic batches made once on the device, so the loops are measured, not the input. Ratios
are medians of per-window ratios, so a neighbour's burst on this shared machine hits both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
from train_step import _TakeTurns, ratio, window_seconds  # noqa: E402

from tfyard.bench.train import prepare_member  # noqa: E402
from tfyard.data import build_dataset  # noqa: E402
from tfyard.models import create_model  # noqa: E402
from tfyard.train.options import TrainOptions  # noqa: E402

HERE = os.path.abspath(__file__)


def resnet20(num_classes, input_shape):
    """The registry's ResNet-20, as a user's model function."""
    return create_model("cifar_resnet20", num_classes, input_shape)


def compiled_resnet20(num_classes, input_shape, jit_compile="auto"):
    model = resnet20(num_classes, input_shape)
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=jit_compile)
    return model


def trainer(args, model: str, jit_compile: bool):
    options = TrainOptions(model=model, dataset="synthetic", image_size=32,
                           batch_size=args.batch_size, learning_rate=0.1, weight_decay=0.0,
                           jit_compile=jit_compile, export=False, num_gpus="0")
    return prepare_member(options)[0].trainer


def registry_vs_function(args) -> float:
    """Median over paired windows of registry time / function time (> 1: function faster)."""
    registry = trainer(args, "cifar_resnet20", True)
    function = trainer(args, f"{HERE}:resnet20", True)
    ratios = []
    for window in range(args.warmup_windows + args.windows):
        order = (registry, function) if window % 2 else (function, registry)
        seconds = {id(run): window_seconds(run, args.window) for run in order}
        if window >= args.warmup_windows:
            ratios.append(seconds[id(registry)] / seconds[id(function)])
    return statistics.median(ratios)


def compiled_vs_fit(args, jit_compile: bool) -> dict[str, list[float]]:
    data = build_dataset("synthetic", "train", batch_size=args.batch_size, image_size=32)
    ours = trainer(args, f"{HERE}:compiled_resnet20", jit_compile)
    turns = _TakeTurns({"tfyard": lambda: window_seconds(ours, args.window)})
    theirs = compiled_resnet20(1000, (32, 32, 3), jit_compile=jit_compile)
    theirs.fit(data, epochs=args.warmup_windows + args.windows, steps_per_epoch=args.window,
               verbose=0, callbacks=[turns])
    return {name: times[args.warmup_windows:] for name, times in turns.seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--window", type=int, default=20, help="steps per timed window")
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--warmup_windows", type=int, default=2)
    args = parser.parse_args()
    print(f"cpus: {os.cpu_count()}; cifar_resnet20 32px, batch {args.batch_size}, "
          f"{args.windows} windows of {args.window} steps after {args.warmup_windows}")
    print(f"--model MODULE:FUNCTION vs the registry name: "
          f"{registry_vs_function(args):.3f}x (target >= 0.98x)")
    images = args.window * args.batch_size
    for jit in (False, True):
        seconds = compiled_vs_fit(args, jit)
        print(f"compiled model, jit_compile={jit}: fit "
              f"{images / statistics.median(seconds['fit']):.1f}, tfyard "
              f"{images / statistics.median(seconds['tfyard']):.1f} images/sec: "
              f"{ratio(seconds, 'tfyard', 'fit'):.2f}x fit (target >= 1.0x)")


if __name__ == "__main__":
    sys.exit(main())
