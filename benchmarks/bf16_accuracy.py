"""bfloat16's accuracy against float32 on the demo's run (issue 66): `tfyard demo`'s
ResNet-20 on the digits, 10 epochs, over seeds, each run `tfyard train` in a fresh process.

The bar for making bfloat16 a default: the demo (seed 1) in bfloat16 >= 95 % validation
top-1, and bfloat16's mean over the seeds within 0.5 points of float32's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from tfyard.cli.train import demo_options

DTYPES = ("float32", "bfloat16")


def top1(output_dir: str, work_dir: str, seed: int, dtype: str, epochs: float) -> float:
    options = demo_options(output_dir, epochs).with_updates(seed=seed, dtype=dtype,
                                                            export=False)
    subprocess.run([sys.executable, "-m", "tfyard", "train", *options.to_argv(), "--work_dir",
                    work_dir, "--quiet"], check=True)
    with open(os.path.join(output_dir, "summary.json")) as handle:
        return json.load(handle)["eval"]["top1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--epochs", type=float, default=10)
    args = parser.parse_args()
    found = {dtype: [] for dtype in DTYPES}
    with tempfile.TemporaryDirectory(prefix="tfyard-bf16-") as scratch:
        for seed in args.seeds:
            for dtype in DTYPES:
                out = os.path.join(scratch, f"{dtype}-{seed}")
                found[dtype].append(top1(out, os.path.join(scratch, "work"), seed, dtype,
                                         args.epochs))
                print(f"  seed {seed} {dtype:<9} top-1 {found[dtype][-1]:.2%}", flush=True)
    means = {dtype: statistics.mean(values) for dtype, values in found.items()}
    print(f"mean top-1: float32 {means['float32']:.2%}, bfloat16 {means['bfloat16']:.2%}, "
          f"difference {100 * (means['bfloat16'] - means['float32']):+.2f} points "
          "(bar: within 0.5)")


if __name__ == "__main__":
    main()
