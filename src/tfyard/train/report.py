"""What a run tells: console progress, metrics.jsonl, TensorBoard scalars, summary.json.

Only the chief writes files; every member may print.
"""

from __future__ import annotations

import json
import os
import sys
import time

import tensorflow as tf


def write_json_atomic(path: str, payload: dict) -> None:
    """Write JSON to a temporary name, then rename, so readers never see half a file."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with tf.io.gfile.GFile(tmp, "w") as handle:
        handle.write(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    tf.io.gfile.rename(tmp, path, overwrite=True)


class Reporter:
    """Sends each report to the console, metrics.jsonl and TensorBoard."""

    def __init__(self, output_dir: str, log_dir: str, writes_files: bool, quiet: bool,
                 total_steps: int, steps_per_epoch: int, name: str = "metrics"):
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.quiet = quiet
        self.tty = sys.stdout.isatty()
        self.writes_files = writes_files
        self.started = time.monotonic()
        self.first_step: int | None = None
        self._jsonl = None
        self._writers = {}
        if writes_files:
            self._jsonl = tf.io.gfile.GFile(os.path.join(output_dir, f"{name}.jsonl"), "a")
            # The chief logs to logs/train and logs/eval; a side-car to logs/<name>.
            self._writers = {
                kind: tf.summary.create_file_writer(
                    os.path.join(log_dir, kind if name == "metrics" else name))
                for kind in ("train", "eval")
            }

    def say(self, text: str) -> None:
        if not self.quiet:
            if self.tty:
                sys.stdout.write("\r\033[K")
            print(text, flush=True)

    def report(self, step: int, metrics: dict, kind: str = "train") -> dict:
        """Record one report; returns the JSON object written to metrics.jsonl."""
        epoch = step / self.steps_per_epoch
        record = {"kind": kind, "step": step, "epoch": round(epoch, 3), "time": time.time(),
                  **{k: float(v) for k, v in metrics.items()}}
        if self.writes_files:
            self._jsonl.write(json.dumps(record) + "\n")
            self._jsonl.flush()
            with self._writers[kind].as_default(step=step):
                for name, value in metrics.items():
                    tf.summary.scalar(name, value)
            self._writers[kind].flush()
        if kind == "eval":
            self.say(f"eval  step {step}: loss {metrics['loss']:.4f} top1 {metrics['top1']:.4f}"
                     f" top5 {metrics['top5']:.4f}")
        else:
            self._progress(step, epoch, metrics)
        return record

    def _progress(self, step: int, epoch: float, metrics: dict) -> None:
        if self.quiet:
            return
        if self.first_step is None:
            self.first_step = step
        text = (f"loss {metrics['loss']:.4f} top1 {metrics['top1']:.4f} "
                f"{metrics['images_per_sec']:.0f} img/s")
        if not self.tty:
            print(f"step {step}/{self.total_steps} epoch {epoch:.2f} lr {metrics['lr']:.4g} "
                  f"{text}", flush=True)
            return
        done = step - self.first_step
        elapsed = time.monotonic() - self.started
        eta = elapsed / max(done, 1) * (self.total_steps - step)
        epoch_no = int((step - 1) // self.steps_per_epoch) + 1
        within = (step - 1) % self.steps_per_epoch + 1
        filled = int(24 * within / self.steps_per_epoch)
        bar = "=" * filled + ">" + " " * (24 - filled)
        sys.stdout.write(f"\r\033[Kepoch {epoch_no} [{bar}] {within}/{self.steps_per_epoch} "
                         f"ETA {int(eta) // 60}:{int(eta) % 60:02d} {text}")
        if within == self.steps_per_epoch or step == self.total_steps:
            sys.stdout.write("\n")
        sys.stdout.flush()

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        for writer in self._writers.values():
            writer.close()
