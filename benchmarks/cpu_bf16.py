"""bfloat16 on a CPU (issue 66): tfyard in float32 and in bfloat16 against a hand-written Keras
`fit` under `mixed_bfloat16`, the same registry model on synthetic batches.

Each side is one process, as a user runs it, and the sides take turns round after round in
an order rotated each round, so a neighbour's burst on a shared machine hits them alike:
- `tfyard DTYPE [--flag ...] [VAR=VALUE ...] [onednn_amp]`: `tfyard bench train --json` (the
  real Trainer, no files), its median images/sec over windows of --steps_per_loop steps;
  `onednn_amp` turns on TensorFlow's graph rewrite to bfloat16 for oneDNN first (meant for a
  float32 model: the alternative to Keras' mixed policy);
- `fit [VAR=VALUE ...]`: the script a user writes: the model under `mixed_bfloat16`,
  `compile(SGD momentum)`, `fit` at Keras' defaults on one batch made once and repeated,
  timed between epoch ends (epochs of --steps_per_loop steps).
Ratios are medians over rounds of the ratio within a round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

CASES = {"resnet50": (224, 1000, 16), "cifar_resnet20": (32, 10, 128)}  # side, classes, batch
SIDES = ("tfyard float32", "tfyard bfloat16", "fit")
AMP = ("import sys, tensorflow as tf; tf.config.optimizer.set_experimental_options("
       "{'auto_mixed_precision_onednn_bfloat16': True}); from tfyard.cli import main; "
       "sys.exit(main(sys.argv[1:]))")
RATIOS = (("tfyard bfloat16", "tfyard float32"), ("tfyard bfloat16", "fit"))


def fit_images_per_sec(args) -> float:
    """The hand-written `fit` under mixed_bfloat16; images/sec of the timed steps."""
    import keras
    import tensorflow as tf

    from tfyard.models import create_model

    side, classes, _ = CASES[args.model]
    model = create_model(args.model, classes, (side, side, 3), dtype_policy="mixed_bfloat16")
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    batch = (tf.random.normal([args.batch_size, side, side, 3]),
             tf.random.uniform([args.batch_size], 0, classes, tf.int32))
    ends = []
    clock = keras.callbacks.LambdaCallback(on_epoch_end=lambda *_: ends.append(time.perf_counter()))
    chunk = args.steps_per_loop
    model.fit(tf.data.Dataset.from_tensors(batch).repeat(), verbose=0, callbacks=[clock],
              epochs=(args.warmup_steps + args.steps) // chunk, steps_per_epoch=chunk)
    return args.steps * args.batch_size / (ends[-1] - ends[args.warmup_steps // chunk - 1])


def run_side(args, side: str) -> dict:
    """One side in a fresh process: its figures (images/sec; FLOP/s too for tfyard)."""
    words = side.split()
    env = {**os.environ, **dict(w.split("=", 1) for w in words if "=" in w)}
    flags = [w for w in words[1:] if "=" not in w and w != "onednn_amp"]
    common = ["--model", args.model, "--batch_size", str(args.batch_size),
              "--steps", str(args.steps), "--warmup_steps", str(args.warmup_steps),
              "--steps_per_loop", str(args.steps_per_loop)]
    if words[0] == "fit":
        argv = [sys.executable, os.path.abspath(__file__), "--child", *common]
    else:
        start = ["-c", AMP] if "onednn_amp" in words else ["-m", "tfyard"]
        argv = [sys.executable, *start, "bench", "train", "--json", "--dtype", *flags, *common]
    out = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--model", choices=sorted(CASES), default="cifar_resnet20")
    parser.add_argument("--batch_size", type=int, help="default: 16 ResNet-50, 128 ResNet-20")
    parser.add_argument("--warmup_steps", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per run")
    parser.add_argument("--steps_per_loop", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sides", nargs="+", default=list(SIDES),
                        help="`tfyard DTYPE [--flag ...] [VAR=VALUE ...]` or `fit [VAR=VALUE]`")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batch_size = args.batch_size or CASES[args.model][2]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.child:
        with contextlib.redirect_stdout(sys.stderr):
            rate = fit_images_per_sec(args)
        print(json.dumps({"images_per_sec": rate}))
        return
    print(f"cpus: {len(os.sched_getaffinity(0))}; {args.model}, batch {args.batch_size}; "
          f"{args.steps} timed steps after {args.warmup_steps}, {args.rounds} rounds",
          flush=True)
    rates = {side: [] for side in args.sides}
    for round_ in range(args.rounds):
        shift = round_ % len(args.sides)
        for side in args.sides[shift:] + args.sides[:shift]:
            figures = run_side(args, side)
            rates[side].append(figures["images_per_sec"])
            achieved = figures.get("achieved_flops_per_sec")
            print(f"  round {round_ + 1}: {side:<40} {rates[side][-1]:8.2f} images/sec"
                  + (f"  {achieved / 1e9:6.1f} GFLOP/s ({figures['peak_fraction']:.0%} of "
                     f"peak)" if achieved and figures.get("peak_fraction") else ""),
                  flush=True)
    print("median images/sec:")
    for side, values in rates.items():
        print(f"  {side:<40} {statistics.median(values):8.2f}")
    print("ratios (median over rounds of the ratio within a round; > 1: faster):")
    pairs = RATIOS if args.sides == list(SIDES) else \
        [(side, base) for at, side in enumerate(args.sides) for base in args.sides[:at]]
    for name, base in pairs:
        ratio = statistics.median(a / b for a, b in zip(rates[name], rates[base], strict=True))
        print(f"  {name:<40} / {base:<20} {ratio:5.2f}x")


if __name__ == "__main__":
    main()
