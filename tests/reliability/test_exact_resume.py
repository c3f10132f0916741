"""Exact resume (issue 14): a SIGKILLed and resumed `--seed` run ends with the weights of an
unbroken one, bit for bit, and sees every example once per epoch across restarts.

Each broken run is compared with an unbroken run of the same flags on the same machine
(same thread counts), shared through a module fixture. The all-reduce case across two
processes is `test_faults.py::test_killed_all_reduce_member_resumes_and_finishes`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.conftest import latest_checkpoint_step, wait_for
from tests.train.conftest import FAST, read_json, read_jsonl, train

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


def unbroken(tmp_path_factory, work_dir: Path, *flags) -> dict:
    out = tmp_path_factory.mktemp("unbroken")
    train(out, work_dir, *flags)
    return read_json(out / "summary.json")


@pytest.fixture(scope="module")
def unbroken_one_device(tmp_path_factory, digits_work):
    return unbroken(tmp_path_factory, digits_work, *DROPOUT, *STEPS)


@pytest.fixture(scope="module")
def unbroken_mirrored(tmp_path_factory, digits_work):
    return unbroken(tmp_path_factory, digits_work, *MIRRORED, *MIRRORED_STEPS)


def committed_ids(path: Path) -> dict[int, list[int]]:
    """Step -> the ids it consumed, the last record of each step winning: that is the run
    whose weights were kept. Every re-run step must have consumed the same ids again."""
    steps: dict[int, list[int]] = {}
    for record in read_jsonl(path):
        previous = steps.setdefault(record["step"], record["ids"])
        assert previous == record["ids"], f"step {record['step']} read other examples"
    return steps


def test_one_device_killed_twice_resumes_bit_identical_and_sees_each_example_once(
        tmp_path, digits_work, unbroken_one_device):
    work = tmp_path / "work"
    work.mkdir()
    for name in ("digits", "tfrecord_counts.json"):  # the shared data, no other run's ids
        os.symlink(digits_work / name, work / name)
    flags = [*DROPOUT, *STEPS, "--record_example_ids"]
    first = kill_after_checkpoint(tmp_path, work, 0, *flags)
    second = kill_after_checkpoint(tmp_path, work, first, *flags)
    assert 0 < first < second < 60 and first % STEPS_PER_EPOCH
    result = train(tmp_path, work, *flags)
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
    assert summary["weights_digest"] == unbroken_mirrored["weights_digest"]


def test_resume_with_other_settings_warns_in_one_line(tmp_path, digits_work):
    flags = ["--train_steps", "5", "--no_export"]
    train(tmp_path, digits_work, *flags, "--jit_compile")
    lines = [line for line in train(tmp_path, digits_work, *flags, *MIRRORED).stdout.splitlines()
             if "warning" in line]
    assert lines == [
        "tfyard: warning: resuming with the mirrored strategy and 2 replicas and XLA off, "
        "the checkpoint was written with the one_device strategy and 1 replica and XLA on: "
        "the run will not be bit-identical to an unbroken one"]
