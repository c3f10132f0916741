"""Pack test helpers: a code directory, a Dockerfile reader and a fake `docker` on PATH."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

TRAIN_SCRIPT = '''\
"""A tiny real training program on the platform contract."""
import argparse
import json
import os

import numpy as np

from tfyard import platform

parser = argparse.ArgumentParser()
platform.add_platform_arguments(parser)
parser.add_argument("--steps", type=int, default=2)
args = parser.parse_args()
place = platform.from_args(args)

import keras  # noqa: E402

x = np.load(os.path.join(place.data_dir, "x.npy"))
y = np.load(os.path.join(place.data_dir, "y.npy"))
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
history = model.fit(x, y, batch_size=4, epochs=1, steps_per_epoch=args.steps, verbose=0)
model.save(os.path.join(place.output_dir, "model.keras"))
with open(os.path.join(place.output_dir, "done.json"), "w") as handle:
    json.dump({"steps": args.steps, "cwd": os.getcwd(), "loss": history.history["loss"][-1]},
              handle)
'''

FAKE_DOCKER = '''#!{python}
"""Stands in for the docker CLI: records argv, env and (for --password-stdin) stdin."""
import json, os, sys
stdin = sys.stdin.read() if "--password-stdin" in sys.argv else None
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "stdin": stdin, "env": dict(os.environ)}}) + "\\n")
if sys.argv[1:2] == ["info"]:
    sys.exit(int(os.environ.get("FAKE_DOCKER_ENGINE_DOWN", "0")))
'''


@pytest.fixture
def code_dir(tmp_path) -> Path:
    """<tmp>/project/code/train.py: the context is <tmp>/project."""
    code = tmp_path / "project" / "code"
    code.mkdir(parents=True)
    (code / "train.py").write_text(TRAIN_SCRIPT)
    return code


@pytest.fixture
def fake_docker(tmp_path, monkeypatch) -> Path:
    """Put a recording `docker` first on PATH; returns the JSON-lines log it appends to."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER.format(python=sys.executable))
    docker.chmod(0o755)
    log = tmp_path / "docker-calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    return log


def docker_calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, joining `\\` continuations and skipping comments."""
    result, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        op, _, rest = (pending + line).strip().partition(" ")
        pending = ""
        result.append((op.upper(), rest.strip()))
    return result


def commands(cmd_file: Path) -> list[str]:
    """The command lines of tfyard-cmd.txt (every line that is not a comment)."""
    return [line for line in cmd_file.read_text().splitlines() if not line.startswith("#")]
