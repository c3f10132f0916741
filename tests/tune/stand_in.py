"""A stand-in for `tfyard train` in tune's tests: no TensorFlow, a run in a fraction of a
second. It reads --output_dir, --learning_rate, --epochs or --train_steps, --eval_every_epochs
or --eval_every_steps, --warmup_epochs and --pause_at_step, writes run.json's numbers (its
epoch, warm-up and total in steps) and eval reports to metrics.jsonl (top1 grows fastest at
learning_rate 0.1) and, like train, keeps its state (step, top1) in checkpoints/
at each report and resumes from it, stops at --pause_at_step with exit 79 (at once when
resumed there), saves and exits 143 on SIGTERM; as one member of several (TF_CONFIG), only
worker 0 writes the run, as train's chief does. An --output_dir in a bucket is written, as
train writes it, to its local copy under --work_dir (`storage.run_copy`), uploaded when its
steps end, however they end.
It fails as told by env:
STAND_IN_FAIL_ABOVE=LR exits 1 for a learning rate above LR; STAND_IN_STEP_S slows a step."""

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import time

STEPS_PER_EPOCH = 100

parser = argparse.ArgumentParser()
parser.add_argument("--output_dir")
parser.add_argument("--work_dir")
parser.add_argument("--learning_rate", type=float, default=0.1)
parser.add_argument("--epochs", type=float, default=1.0)
parser.add_argument("--eval_every_epochs", type=float)
parser.add_argument("--train_steps", "--max_number_of_steps", type=int)
parser.add_argument("--eval_every_steps", type=int)
parser.add_argument("--pause_at_step", type=int)
parser.add_argument("--warmup_epochs", type=float, default=0.0)
args, _ = parser.parse_known_args()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
if args.learning_rate > float(os.environ.get("STAND_IN_FAIL_ABOVE", "inf")):
    print("stand-in: learning rate too high, the loss diverged")
    sys.exit(1)
task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
print(f"stand-in: member {task.get('type', 'worker')}:{task.get('index', 0)}")
print(f"stand-in: GPUs {os.environ.get('CUDA_VISIBLE_DEVICES')}, memory growth "
      f"{os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH')}")
if task.get("index", 0):   # another member: a private directory, as train's non-chief
    args.output_dir = tempfile.mkdtemp()
published = contextlib.nullcontext()
if "://" in args.output_dir:   # a bucket: tfyard's own copy and upload (no TensorFlow)
    from tfyard.storage import location, mirror, run_copy

    url, args.output_dir = args.output_dir, run_copy(args.output_dir, args.work_dir)

    @contextlib.contextmanager
    def uploading():
        try:
            yield
        finally:
            mirror.uploaded(args.output_dir, location(url), "--output_dir")

    published = uploading()
os.makedirs(os.path.join(args.output_dir, "checkpoints"), exist_ok=True)
path = os.path.join(args.output_dir, "metrics.jsonl")
saved = os.path.join(args.output_dir, "checkpoints", "state.json")
state = json.load(open(saved)) if os.path.exists(saved) else {"step": 0, "top1": 0.0}
if state["step"] == args.pause_at_step:   # resumed where it was to stop, as train does
    sys.exit(79)
every = args.eval_every_steps or round(args.eval_every_epochs * STEPS_PER_EPOCH)
last = args.train_steps or round(args.epochs * STEPS_PER_EPOCH)
run_json = os.path.join(args.output_dir, "run.json")   # amended, as train does
record = json.load(open(run_json)) if os.path.exists(run_json) else {}
with open(run_json + ".tmp", "w") as stream:
    json.dump({**record, "steps_per_epoch": STEPS_PER_EPOCH, "total_steps": last,
               "warmup_steps": int(args.warmup_epochs * STEPS_PER_EPOCH)}, stream)
os.replace(run_json + ".tmp", run_json)
gain = (1.0 - abs(math.log10(args.learning_rate) + 1.0) / 4) * every / last
with published, open(path, "a") as stream:
    for step in range(state["step"] + every, last + 1, every):
        time.sleep(float(os.environ.get("STAND_IN_STEP_S", "0.05")))
        state = {"step": step, "top1": state["top1"] + gain}
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})   # report and save as one
        stream.write(json.dumps({"kind": "eval", "step": step, "epoch": step / STEPS_PER_EPOCH,
                                 "top1": state["top1"], "loss": 1 - state["top1"]}) + "\n")
        stream.flush()
        with open(saved + ".tmp", "w") as checkpoint:
            json.dump(state, checkpoint)
        os.replace(saved + ".tmp", saved)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        if step == args.pause_at_step:
            sys.exit(79)
print(f"stand-in: done at step {last}, TF_NUM_INTRAOP_THREADS="
      f"{os.environ.get('TF_NUM_INTRAOP_THREADS')}")
