"""CPU scaling: one pinned worker vs N pinned workers (MultiWorkerMirrored over loopback).

Each worker is a `tfyard bench train --pin_cpu` process on its own core with one
TensorFlow thread, CIFAR ResNet-20 on synthetic 32x32 data, a fixed per-worker batch
(weak scaling). Prints the table and the efficiency of N workers against one measured in
the same invocation: rate(N) / (N x rate(1)).
"""

from __future__ import annotations

import argparse
import os

from tfyard.bench.scaling import measure

TARGET = 0.90


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(2, len(os.sched_getaffinity(0))))
    parser.add_argument("--per_worker_batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per run")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    train_args = ["--model", "cifar_resnet20", "--image_size", "32", "--steps", str(args.steps),
                  "--warmup_steps", "10", "--steps_per_loop", "10",
                  "--per_replica_batch_size", str(args.per_worker_batch)]
    result = measure(train_args, args.workers)
    print(f"cpus: {os.cpu_count()}  model: cifar_resnet20 32px  batch per worker: "
          f"{args.per_worker_batch}  devices: {result['device']}")
    for row in result["rows"]:
        print(f"workers {row['devices']}: {row['images_per_sec']:8.1f} images/sec  "
              f"step {row['step_time_ms']:7.1f} ms  efficiency {row['efficiency']:.0%}  "
              f"({row['strategy']})")
    last = result["rows"][-1]
    print(f"ratio {last['devices']} workers / ({last['devices']} x 1 worker): "
          f"{last['efficiency']:.2f} (target >= {TARGET:.2f})")


if __name__ == "__main__":
    main()
