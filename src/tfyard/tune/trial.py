"""One trial as it runs: an ordinary `tfyard train` process group (launch's), whose
metrics.jsonl tune reads as it grows, reporting each figure to Optuna and stopping the run
with SIGTERM when the pruner says so (train saves a checkpoint at SIGTERM and exits with the
retryable PREEMPTED_EXIT_CODE, so a pruned run ends cleanly, resumable).

A trial's process is a spare where one is ready (`Spares`): started ahead of its trial, it
has imported Python's modules, TensorFlow and tfyard's training code (~2 s of a trial's
start) while the trials before it trained, and waits for its command line
(`cli.spare`). Where trials leave a core idle (GPU trials, a machine with cores to spare)
the next trial starts training that much sooner; on a machine the trials fill, the import's
CPU is spent beside them instead of before.

When tune spaces a trial's evaluations (every `every_epochs`), each figure goes to Optuna
at its evaluation's number (1, 2, ... 10): the pruners then compare trials at the same point
of their training whatever their batch size, and successive halving's rungs are known before
any trial ends. Otherwise at its training step."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from tfyard.launch.local import pump, signal_group, spawn, stop_group
from tfyard.runfiles.layout import METRICS, REPORTS, RunDirectory
from tfyard.storage import in_bucket, read_object
from tfyard.tune.study import Metric

TFYARD = (sys.executable, "-m", "tfyard")
TRAIN = (*TFYARD, "train")   # what a trial runs, and the commands a spare takes
SPARE = (sys.executable, "-m", "tfyard.cli.spare")
GRACE_S = 60.0   # a pruned or stopped trial's time to save its checkpoint before SIGKILL
BUCKET_READ_S = 10.0   # a Ray trial's reports in a bucket: read this often (train uploads
FLAG = "--output_dir"  # them every few seconds)


class Spares:
    """At most one spare ready for the next trial, all with the trials' environment `env`."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.ready: subprocess.Popen | None = None

    def process(self, command: Sequence[str], more: bool) -> subprocess.Popen:
        """A process group running `command`: a spare handed it when it is `tfyard train`
        (not a stand-in, nor a launcher of Ray's), and a new spare made ready when `more`
        trials may follow."""
        if tuple(command[:len(TRAIN)]) != TRAIN:
            return spawn(command, self.env)
        proc, self.ready = self.ready or self._spare(), None
        try:
            proc.stdin.write(json.dumps(list(command[len(TFYARD):])).encode() + b"\n")
            proc.stdin.close()
        except BrokenPipeError:   # it died importing: its exit and output tell the trial's end
            pass
        if more:
            self.ready = self._spare()
        return proc

    def close(self) -> None:
        """End the spare no trial took (it exits at its empty stdin; the group goes)."""
        if self.ready is not None:
            self.ready.stdin.close()
            stop_group(self.ready, grace=5.0)
            self.ready.stdout.close()
            self.ready = None

    def _spare(self) -> subprocess.Popen:
        return spawn(SPARE, self.env, stdin=subprocess.PIPE)


class RunningTrial:
    """The process `proc` (launch's `spawn`) of Optuna trial `trial`, writing its run into
    `run_dir`; its output goes to `log_path`, whose last lines name a failure."""

    def __init__(self, trial, run_dir: str, proc: subprocess.Popen,
                 log_path: str, metric: Metric, reported: Sequence[int] = (),
                 every_epochs: float | None = None):
        self.trial, self.run_dir, self.log_path, self.metric = trial, run_dir, log_path, metric
        self.every_epochs = every_epochs
        self.reported = set(reported)   # Optuna steps a resumed trial reported before
        self.value: float | None = None
        self.step = 0   # the training step of its last figure told to Optuna
        self.pruned, self._offset, self._term_at, self._read_at = False, 0, None, -math.inf
        self._log = open(log_path, "a", encoding="utf-8")
        lock = threading.Lock()

        def write(line: str) -> None:
            with lock:
                self._log.write(line)
                self._log.flush()

        self.proc = proc
        self._pump = pump(self.proc.stdout, f"[trial {trial.number}]", write)

    @property
    def number(self) -> int:
        return self.trial.number

    def poll(self) -> bool:
        """Read the run's new reports, prune it if Optuna says so; True once it has ended.
        Whether it ended is asked first, so a run's last reports are read before it counts as
        ended (its value is its last figure, even when it wrote it just before exiting)."""
        ended = self.proc.poll() is not None
        for record in self._new_records(ended):
            value = self.metric.value(record)
            if value is None:
                continue
            self.value = value
            step = self._optuna_step(record)
            if step not in self.reported and math.isfinite(value) and not self.pruned:
                self.reported.add(step)
                self.step = int(record["step"])
                self.trial.report(value, step)
                if not ended and self.trial.should_prune():
                    self.pruned = True
                    self.stop()
        if self._term_at is not None and time.monotonic() - self._term_at > GRACE_S:
            signal_group(self.proc, signal.SIGKILL)
        if not ended:
            return False
        self._end()
        return True

    def _optuna_step(self, record: dict) -> int:
        """The step `record` goes to Optuna at: its evaluation's number when tune spaces
        them, else its training step. (A last evaluation at the run's end, off the cadence,
        may share the number of the one before it; Optuna keeps the first.)"""
        if self.every_epochs:
            return max(1, round(record["epoch"] / self.every_epochs))
        return int(record["step"])

    def stop(self) -> None:
        """Ask the run to save and exit (SIGTERM to its group); SIGKILL after GRACE_S."""
        if self._term_at is None:
            self._term_at = time.monotonic()
            signal_group(self.proc, signal.SIGTERM)

    def wait(self) -> None:
        """Wait for a stopped run to save and exit (SIGKILL after GRACE_S)."""
        try:
            self.proc.wait(max(0.0, GRACE_S - (time.monotonic() - (self._term_at or 0))))
        except subprocess.TimeoutExpired:
            signal_group(self.proc, signal.SIGKILL)
            self.proc.wait()
        self._end()

    def tail(self, lines: int = 3) -> str:
        """The last lines the run printed, for its failure's one line."""
        with open(self.log_path, encoding="utf-8", errors="replace") as stream:
            last = [line.strip() for line in stream.readlines()[-lines:]]
        return " | ".join(line for line in last if line)

    def _end(self) -> None:
        signal_group(self.proc, signal.SIGKILL)   # grandchildren that outlived the leader
        self.proc.guard.stdin.close()
        self.proc.guard.wait()
        self._pump.join(5)
        self._log.close()

    def _unread(self, ended: bool) -> bytes:
        """metrics.jsonl past what was read: on disk, or (a Ray trial of a bucket study,
        whose local copy is on its node) the bucket's object, read whole, at most every
        BUCKET_READ_S and once more when the trial has ended (train uploads it at its exit).
        A file shorter than what was read was rewritten: a resumed trial dropped the reports
        of steps it runs again."""
        if in_bucket(self.run_dir, FLAG):
            if not ended and time.monotonic() - self._read_at < BUCKET_READ_S:
                return b""
            self._read_at = time.monotonic()
            data = read_object(f"{self.run_dir}/{METRICS}{REPORTS}", FLAG) or b""
            if len(data) < self._offset:
                self._offset = 0
            return data[self._offset:]
        run = RunDirectory(self.run_dir)
        if run.files.size(run.metrics) < self._offset:
            self._offset = 0
        return run.files.read_from(run.metrics, self._offset)

    def _new_records(self, ended: bool) -> list[dict]:
        """The complete lines metrics.jsonl gained since the last call."""
        data = self._unread(ended)
        complete = data[:data.rfind(b"\n") + 1]
        self._offset += len(complete)
        records = []
        for line in complete.splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue   # a line torn by a kill: the rerun writes the step again
        return records
