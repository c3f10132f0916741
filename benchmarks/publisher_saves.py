"""What a run's checkpoint saves cost its bucket publisher, at a quiet machine's pace.

The real `Publisher` and moto's S3 server on 127.0.0.1 are fed one training run's saves at
fixed times (the step time given), so the figures do not move with the machine's load: the
checkpoint files and bytes uploaded, and the CPU seconds of the threads that upload and of
the store's server. Defaults: `object_storage.py`'s training run, ResNet-20 on digits, 100
steps at a quiet 2-core machine's pace (about 0.21 s a step), saving at each epoch end (every
11 steps) and every 50 steps, each save 2.2 MB of data and a 9 KB index, 3 kept.

Run it with the code to compare on PYTHONPATH (before and after a change to the publisher).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import cpu_probe
from object_storage import BUCKET, server_seconds, serving


def save_steps(steps: int, epoch: int, every: int) -> list[int]:
    """The steps a run saves at: each epoch end, every `every` steps, and the last."""
    return sorted({*range(epoch, steps + 1, epoch), *range(every, steps + 1, every), steps})


def write_save(checkpoints: str, step: int, kept: list[int], sizes: tuple[int, int]) -> str:
    """A save as TensorFlow leaves it: its files, and the pointer listing `kept` and it; the
    saves no longer kept removed. Its path (`.../ckpt-N`)."""
    path = os.path.join(checkpoints, f"ckpt-{step}")
    for suffix, size in zip((".data-00000-of-00001", ".index"), sizes, strict=True):
        with open(path + suffix, "wb") as handle:
            handle.write(os.urandom(size))
    with open(path + ".meta.json", "w") as handle:
        handle.write("{}")
    for name in os.listdir(checkpoints):
        if name.startswith("ckpt-") and int(name[5:].split(".")[0]) not in kept:
            os.remove(os.path.join(checkpoints, name))
    with open(os.path.join(checkpoints, "checkpoint"), "w") as handle:
        handle.write(f'model_checkpoint_path: "ckpt-{step}"\n' + "".join(
            f'all_model_checkpoint_paths: "ckpt-{number}"\n' for number in kept))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step_s", type=float, default=0.21)
    parser.add_argument("--epoch_steps", type=int, default=11)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--data_bytes", type=int, default=2_200_000)
    parser.add_argument("--index_bytes", type=int, default=9_000)
    parser.add_argument("--keep", type=int, default=3)
    args = parser.parse_args()
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    cpu_probe._timed_threads()
    cpu_probe._counted_store()
    import tensorflow  # noqa: F401 - a training run has it loaded before its first save

    from tfyard.train.rundir.bucket import Publisher

    with serving(lowest=True) as (server, _), \
            tempfile.TemporaryDirectory(prefix="tfyard-saves-") as copy:
        checkpoints = os.path.join(copy, "checkpoints")
        os.makedirs(checkpoints)
        publisher = Publisher(f"s3://{BUCKET}/run", copy, set())
        served, started, kept = server_seconds(server), time.monotonic(), []
        for step in save_steps(args.steps, args.epoch_steps, args.every):
            time.sleep(max(0.0, started + step * args.step_s - time.monotonic()))
            kept = [*kept, step][-args.keep:]
            publisher.checkpoint_saved(write_save(checkpoints, step, kept,
                                                  (args.data_bytes, args.index_bytes)))
        publisher.close()
        server_s = server_seconds(server) - served
    saves = {name: figure for name, figure in cpu_probe.uploads.items()
             if name.startswith("ckpt-")}
    publishing = sum(seconds for name, seconds in cpu_probe.threads.items()
                     if name.startswith("tfyard-publish"))
    print(f"{len(save_steps(args.steps, args.epoch_steps, args.every))} saves in "
          f"{args.steps * args.step_s:.0f} s: {len({n.split('.')[0] for n in saves})} uploaded, "
          f"{sum(f['calls'] for f in saves.values())} checkpoint files, "
          f"{sum(f['bytes'] for f in saves.values()) / 1e6:.1f} MB; CPU s: the publisher's "
          f"thread {publishing:.2f}, the store's server {server_s:.2f}")


if __name__ == "__main__":
    main()
