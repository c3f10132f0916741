"""One trial, started and as it runs. `start_trial` makes its `tfyard train` command line (the
shared flags, its params, the evaluation cadence its rungs need, the seed, PBT's pause) and
places it on its GPUs (a resumed trial keeps its share, a new one takes the least used).

As it runs it is an ordinary `tfyard train` process group (launch's), whose
metrics.jsonl tune reads as it grows, reporting each figure to Optuna and stopping the run
with SIGTERM when the pruner says so (train saves a checkpoint at SIGTERM and exits with the
retryable PREEMPTED_EXIT_CODE, so a pruned run ends cleanly, resumable).

A `tfyard train` trial's process is forked from a warm server (`trial_processes`,
`launch.forked`) that imported Python's modules, TensorFlow and tfyard's training code once
for the study: ~2 s of CPU a trial saved, on a machine the trials fill as on one with cores
to spare. Any other command (a stand-in, Ray's launcher) runs as a process of its own.

When tune spaces a trial's evaluations (`every` epochs or train steps), each figure goes to
Optuna at its evaluation's number (1, 2, ... 10): the pruners then compare trials at the same
point of their training whatever their batch size, and successive halving's rungs are known
before any trial ends. Otherwise at its training step."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from tfyard.flags import OUTPUT_FLAG
from tfyard.launch.forked import ForkServer
from tfyard.launch.local import end_group, pump, signal_group
from tfyard.runfiles.layout import RunDirectory
from tfyard.tracking.study import StudyRuns
from tfyard.tune import pbt
from tfyard.tune import study as studies
from tfyard.tune.rungs import Rungs
from tfyard.tune.space import option_argv
from tfyard.tune.study import Metric

FORKED = (sys.executable, "-m", "tfyard", "train")   # what the fork server runs
TRAIN = FORKED   # what a trial runs (the tests' stand-in replaces it, the server stays train)
SERVER = (sys.executable, "-m", "tfyard.cli.forkserver")
GRACE_S = 60.0   # a pruned or stopped trial's time to save its checkpoint before SIGKILL


def trial_processes(env: dict[str, str]) -> ForkServer:
    """Where the trials' processes come from, all with the environment `env`: `tfyard
    train` forked from the server, any other command spawned. Close it at the study's end."""
    return ForkServer(SERVER, FORKED, env)


class RunningTrial:
    """The process `proc` (launch's `spawn`) of Optuna trial `trial`, writing its run into
    `run_dir`; its output goes to `log_path`, whose last lines name a failure."""

    def __init__(self, trial, run_dir: str, proc: subprocess.Popen,
                 log_path: str, metric: Metric, rungs: Rungs, reported: Sequence[int] = (),
                 every: tuple[str, float] | None = None, devices: str | None = None):
        self.trial, self.run_dir, self.log_path, self.metric = trial, run_dir, log_path, metric
        self.rungs = rungs
        self.every, self.devices = every, devices   # every: ("epochs" or "train_steps", N)
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
            if value is None or self.pruned:   # a pruned trial's value: where it was pruned
                continue
            self.value = value
            step = self._optuna_step(record)
            if step not in self.reported and math.isfinite(value) and not self.pruned:
                self.reported.add(step)
                self.step = int(record["step"])
                self.trial.report(value, step)
                if not ended and self.rungs.ready(self.trial.study, record, self._warmup,
                                                  self.every) \
                        and self.trial.should_prune():
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
        if self.every:
            unit, every = self.every
            return max(1, round(record["epoch" if unit == "epochs" else "step"] / every))
        return int(record["step"])

    def _warmup(self) -> int:
        """The run's learning-rate warm-up in steps, from its run.json (0 where it has none:
        another command than train)."""
        run = RunDirectory(self.run_dir)
        data = run.files.read_from(run.run_file, 0)
        lines = data.strip().splitlines()
        try:
            return int(json.loads(lines[-1]).get("warmup_steps") or 0) if lines else 0
        except ValueError:
            return 0

    def stop(self) -> None:
        """Ask the run to save and exit (SIGTERM to its group); SIGKILL after GRACE_S."""
        if self._term_at is None:
            self._term_at = time.monotonic()
            signal_group(self.proc, signal.SIGTERM)

    def wait(self) -> None:
        """Wait for a stopped run to save and exit (SIGKILL after GRACE_S)."""
        self._end(max(0.0, GRACE_S - (time.monotonic() - (self._term_at or 0))))

    def tail(self, lines: int = 3) -> str:
        """The last lines the run printed, for its failure's one line."""
        with open(self.log_path, encoding="utf-8", errors="replace") as stream:
            last = [line.strip() for line in stream.readlines()[-lines:]]
        return " | ".join(line for line in last if line)

    def _end(self, grace: float = 0.0) -> None:
        end_group(self.proc, grace)
        self._pump.join(5)
        self._log.close()

    def _unread(self, ended: bool) -> bytes:
        """metrics.jsonl past what was read: on disk, or (a Ray trial of a bucket study,
        whose local copy is on its node) the bucket's object, read at most as often as it
        arrives there (`lag_s`) and once more when the trial has ended (train uploads it at
        its exit). A file shorter than what was read was rewritten: a resumed trial dropped
        the reports of steps it runs again."""
        run = RunDirectory(self.run_dir)
        if not ended and time.monotonic() - self._read_at < run.files.lag_s:
            return b""
        self._read_at = time.monotonic()
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


DEVICES = "cuda_visible_devices"   # a trial's user attribute: the GPUs it was given


def start_trial(search, study, storage, asked, left, runs: StudyRuns | None,
           population: pbt.Population | None, processes: ForkServer,
           busy: list[str | None], rungs: Rungs) -> RunningTrial:
    """A new trial, `asked` of the sampler, or `left` (a trial a killed tune left running, or
    a PBT trial going on after its interval) with its own params, started as a process of
    `processes` on its GPUs (`busy`: those of the trials running); `left` is reopened
    through the `storage` object."""
    place = search.place()
    if left is None:
        trial = asked
        params = {p.name: p.suggest(trial) for p in search.space if p.kind}
        run_dir = place.run_dir(trial.number)
        trial.set_user_attr("run_dir", run_dir)
        devices = devices_for(search, None, busy)
        reported, verb = (), "started"
    else:
        trial = studies.reopened(study, storage, left.number)
        params = studies.values_now(left) if population else left.params
        run_dir = left.user_attrs["run_dir"]
        devices = devices_for(search, left.user_attrs.get(DEVICES), busy)
        reported, verb = left.intermediate_values, "resumed"
    if devices is not None:
        trial.set_user_attr(DEVICES, devices)
    work_dir = place.work_dir(trial.number)
    if runs:
        runs.child(trial, run_dir, params, place.local_run(run_dir, work_dir))
    command = [*TRAIN, *search.train_argv, *search.fixed_argv, *option_argv(params),
               OUTPUT_FLAG, run_dir, "--work_dir", work_dir]
    every = None
    if search.evaluations:   # the pruner's rungs, at the same share of every trial
        every = (search.budget, params.get(search.budget, search.length) / search.evaluations)
        if search.budget == "train_steps":
            every = (search.budget, max(1, round(every[1])))
            command += ["--eval_every_steps", str(every[1])]
        else:
            command += ["--eval_every_epochs", f"{every[1]:.6g}"]
    if search.seed is not None and "seed" not in params:
        command += ["--seed", str(search.seed)]
    if population:
        command += ["--pause_at_step", str(population.pause(study))]
    if search.ray:
        command = search.ray.command(command)
    log_path = place.home.trial_log(trial.number)
    where = "" if devices is None else f" on GPU(s) {devices}"
    print(f"tune: trial {trial.number} {verb}{where}: {shown(params)}", flush=True)
    reports = run_dir if search.ray else place.local_run(run_dir, work_dir)   # Ray: on a node
    gpus = None if devices is None else {"CUDA_VISIBLE_DEVICES": devices,
                                         "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    return RunningTrial(trial, reports, processes.process(command, gpus), log_path,
                        search.metric, rungs, reported, every, devices)


def devices_for(search, recorded: str | None, busy: list[str | None]) -> str | None:
    """The GPUs a trial sees: those it had before a kill (a resumed trial keeps its share),
    else the share the fewest running trials use, the first such; None without GPUs."""
    if not search.gpus:
        return None
    if recorded in search.gpus:
        return recorded
    return min(search.gpus, key=busy.count)


def trial_env(search) -> dict[str, str]:
    """Every trial's environment: tune's, output unbuffered, and each trial's share of the
    cores when trials share the machine."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if search.threads:
        env["TF_NUM_INTRAOP_THREADS"] = str(search.threads)   # TensorFlow's op threads
    return env


def shown(params: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in params.items()) or "(fixed options only)"
