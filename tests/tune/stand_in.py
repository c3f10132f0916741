"""A stand-in for `tfyard train` in tune's tests: no TensorFlow, a run in a fraction of a
second. It reads --output_dir, --learning_rate, --epochs and --eval_every_epochs, writes
eval reports to metrics.jsonl (top1 peaks at learning_rate 0.1) and, like train, resumes
after its last report, saves and exits 143 on SIGTERM, and fails as told by env:
STAND_IN_FAIL_ABOVE=LR exits 1 for a learning rate above LR; STAND_IN_STEP_S slows a step."""

import argparse
import json
import math
import os
import signal
import sys
import time

STEPS_PER_EPOCH = 100

parser = argparse.ArgumentParser()
parser.add_argument("--output_dir")
parser.add_argument("--learning_rate", type=float, default=0.1)
parser.add_argument("--epochs", type=float, default=1.0)
parser.add_argument("--eval_every_epochs", type=float)
args, _ = parser.parse_known_args()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
if args.learning_rate > float(os.environ.get("STAND_IN_FAIL_ABOVE", "inf")):
    print("stand-in: learning rate too high, the loss diverged")
    sys.exit(1)
os.makedirs(args.output_dir, exist_ok=True)
path = os.path.join(args.output_dir, "metrics.jsonl")
done = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
every = round(args.eval_every_epochs * STEPS_PER_EPOCH)
last = round(args.epochs * STEPS_PER_EPOCH)
top1 = 1.0 - abs(math.log10(args.learning_rate) + 1.0) / 4
with open(path, "a") as stream:
    for step in range((done[-1]["step"] if done else 0) + every, last + 1, every):
        time.sleep(float(os.environ.get("STAND_IN_STEP_S", "0.05")))
        figure = top1 * step / last
        stream.write(json.dumps({"kind": "eval", "step": step, "top1": figure,
                                 "loss": 1 - figure}) + "\n")
        stream.flush()
print(f"stand-in: done at step {last}")
