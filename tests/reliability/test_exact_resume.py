"""Exact resume (issue 14): a SIGKILLed and resumed `--seed` run ends with the weights of an
unbroken one, bit for bit, and sees every example once per epoch across restarts.

Each broken run is compared with an unbroken run of the same flags on the same machine
(same thread counts), shared through a module fixture. Every killed run is a fresh process
that gets a real SIGKILL; the one-device unbroken run and resume go through the CLI's `main`
in the test's process (same thread pools: the resume would warn otherwise), the mirrored
ones in fresh processes (the CPU is split into replicas before TensorFlow starts). The
all-reduce case across two processes is
`test_faults.py::test_a_frozen_then_a_killed_all_reduce_member_each_restart_the_job_exactly`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_here
from tests.reliability.conftest import latest_checkpoint_step, wait_for
from tests.train.conftest import FAST, read_json, read_jsonl, train
from tfyard.cli import main

# Digits: 1,497 training examples, 46 steps of 32 per epoch. Checkpoints every 10 steps put
# every kill mid-epoch; 60 steps cross the epoch end, where a global batch spans two epochs.
EXAMPLES, STEPS_PER_EPOCH = 1497, 46
STEPS = ["--train_steps", "60", "--checkpoint_every_steps", "10", "--no_export"]
# A model with Dropout, so the Keras seed-generator states must come back with the weights.
DROPOUT = ["--model", "mnist_cnn", "--image_size", "28"]
MIRRORED = ["--ds", "mirrored", "--cpu_replicas", "2"]
# ResNet-8: its replicas average batch-norm statistics at every boundary (5, 10, 15, 20).
MIRRORED_STEPS = ["--train_steps", "20", "--checkpoint_every_steps", "5", "--no_export"]


def start_train(output_dir: Path, work_dir: Path, *flags) -> subprocess.Popen:
    command = [sys.executable, "-m", "tfyard", "train", *FAST, "--output_dir", output_dir,
               "--work_dir", work_dir, *flags]
    return subprocess.Popen(list(map(str, command)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def kill_after_checkpoint(output_dir: Path, work_dir: Path, after: int, *flags) -> int:
    """Start a run on output_dir, SIGKILL it once a checkpoint past `after` exists (the
    step it reached may be several steps later), and return that checkpoint's step."""
    proc = start_train(output_dir, work_dir, *flags)
    try:
        wait_for(lambda: latest_checkpoint_step(output_dir) > after, proc)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    return latest_checkpoint_step(output_dir)


@pytest.fixture(scope="module")
def unbroken_one_device(tmp_path_factory, digits_work) -> dict:
    out = tmp_path_factory.mktemp("unbroken")
    assert main(list(map(str, ["train", *FAST, "--output_dir", out, "--work_dir", digits_work,
                               *DROPOUT, *STEPS]))) == 0
    return read_json(out / "summary.json")


@pytest.fixture(scope="module")
def unbroken_mirrored(tmp_path_factory, digits_work) -> Path:
    """The run directory of an unbroken mirrored run (a fresh process: see the docstring)."""
    out = tmp_path_factory.mktemp("unbroken")
    train(out, digits_work, *MIRRORED, *MIRRORED_STEPS)
    return out


def committed_ids(path: Path) -> dict[int, list[int]]:
    """Step -> the ids it consumed, the last record of each step winning: that is the run
    whose weights were kept. Every re-run step must have consumed the same ids again."""
    steps: dict[int, list[int]] = {}
    for record in read_jsonl(path):
        previous = steps.setdefault(record["step"], record["ids"])
        assert previous == record["ids"], f"step {record['step']} read other examples"
    return steps


def test_one_device_killed_twice_resumes_bit_identical_and_sees_each_example_once(
        tmp_path, digits_work, unbroken_one_device, capsys):
    work = tmp_path / "work"
    work.mkdir()
    for name in ("digits", "tfrecord_counts.json"):  # the shared data, no other run's ids
        os.symlink(digits_work / name, work / name)
    flags = [*DROPOUT, *STEPS, "--record_example_ids"]
    first = kill_after_checkpoint(tmp_path, work, 0, *flags)
    second = kill_after_checkpoint(tmp_path, work, first, *flags)
    assert 0 < first < second < 60 and first % STEPS_PER_EPOCH
    result = run_here(capsys, "train", *FAST, "--output_dir", tmp_path, "--work_dir", work,
                      *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "warning" not in result.stdout, result.stdout
    summary = read_json(tmp_path / "summary.json")
    assert summary["resumed_from_step"] == second and summary["final_step"] == 60
    assert summary["weights_digest"] == unbroken_one_device["weights_digest"]

    steps = committed_ids(work / "example_ids" / "single.jsonl")
    assert sorted(steps) == list(range(60))
    stream = [i for step in range(60) for i in steps[step]]
    assert all(len(steps[step]) == 32 for step in steps)
    assert sorted(stream[:EXAMPLES]) == list(range(EXAMPLES))     # epoch 0: each once
    assert len(set(stream[EXAMPLES:])) == len(stream) - EXAMPLES  # epoch 1 so far: no repeat


def test_mirrored_two_replicas_killed_resumes_bit_identical(tmp_path, digits_work,
                                                            unbroken_mirrored):
    killed_at = kill_after_checkpoint(tmp_path, digits_work, 0, *MIRRORED, *MIRRORED_STEPS)
    assert killed_at < 20
    train(tmp_path, digits_work, *MIRRORED, *MIRRORED_STEPS)
    summary = read_json(tmp_path / "summary.json")
    assert summary["replicas"] == 2 and summary["resumed_from_step"] == killed_at
    unbroken = read_json(unbroken_mirrored / "summary.json")
    assert summary["weights_digest"] == unbroken["weights_digest"]


def test_resume_with_other_settings_warns_in_one_line(tmp_path, digits_work, unbroken_mirrored,
                                                      capsys):
    # The mirrored run's last checkpoint (2 replicas, XLA off), resumed on one device with
    # XLA on: its restore warns, and no step is left to run.
    out = tmp_path / "run"
    shutil.copytree(unbroken_mirrored, out)
    result = run_here(capsys, "train", *FAST, "--output_dir", out, "--work_dir", digits_work,
                      *MIRRORED_STEPS, "--jit_compile")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if "warning" in line]
    assert lines == [
        "tfyard: warning: resuming with the one_device strategy and 1 replica and XLA on, "
        "the checkpoint was written with the mirrored strategy and 2 replicas and XLA off: "
        "the run will not be bit-identical to an unbroken one"]


def test_a_bfloat16_run_killed_resumes_bit_identical(tmp_path, digits_work, capsys):
    """Exact resume holds in bfloat16 too (issue 66): the mixed policy's casts and the
    float32 weights come back as they were, on the same machine."""
    flags = [*DROPOUT, *STEPS, "--dtype", "bfloat16"]
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    assert main(list(map(str, ["train", *FAST, "--output_dir", unbroken, "--work_dir",
                               digits_work, *flags]))) == 0
    assert 0 < kill_after_checkpoint(broken, digits_work, 0, *flags) < 60
    result = run_here(capsys, "train", *FAST, "--output_dir", broken, "--work_dir",
                      digits_work, *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    summary, expected = read_json(broken / "summary.json"), read_json(unbroken / "summary.json")
    assert summary["resumed_from_step"] > 0 and summary["dtype"] == "bfloat16"
    assert summary["weights_digest"] == expected["weights_digest"]
