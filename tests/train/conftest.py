"""Shared helpers for training tests: small real runs on the bundled digits."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_tfyard

# Small enough for 2 CPU cores, big enough that learning shows: 16x16 digits, batch 32.
FAST = ["--model", "cifar_resnet20", "--dataset", "digits", "--image_size", "16",
        "--batch_size", "32", "--learning_rate", "0.05", "--num_gpus", "0", "--seed", "3",
        "--steps_per_loop", "5", "--quiet"]


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def train(output_dir: Path, work_dir: Path, *extra, env=None):
    result = run_tfyard("train", *FAST, "--output_dir", output_dir, "--work_dir", work_dir,
                        *extra, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result
