"""Shared helpers for training tests: small real runs on the bundled digits."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import run_tfyard, tfyard_logger_kept

USER_CODE = Path(__file__).resolve().parents[1] / "user_code"

# Small enough for 2 CPU cores, big enough that learning shows: 16x16 digits, batch 32.
FAST = ["--model", "cifar_resnet8", "--dataset", "digits", "--image_size", "16",
        "--batch_size", "32", "--learning_rate", "0.05", "--num_gpus", "0", "--seed", "3",
        "--steps_per_loop", "5", "--quiet",
        # ResNet-8 (batch norm and residuals like ResNet-20, a third of the layers) without
        # XLA: 11 s a process on 2 cores instead of 25 s. The tests about XLA (bench, demo,
        # the loop's unit tests, the resume-settings warning) turn it on.
        "--no_jit_compile"]


def forget_user_modules() -> None:
    """Drop tests/user_code's modules imported as a script's (by file path, a top-level
    name) from sys.modules: the next import is a fresh one."""
    for name, module in list(sys.modules.items()):
        if "." not in name and (getattr(module, "__file__", None) or "").startswith(
                str(USER_CODE)):
            del sys.modules[name]


@contextlib.contextmanager
def user_code_imported():
    """A CLI run in this process imports the user's module by path as a script would (its
    directory on sys.path, the module in sys.modules): undone on leaving, so each run
    imports it afresh and nothing after it sees tests/user_code's modules."""
    path = list(sys.path)
    forget_user_modules()
    try:
        yield
    finally:
        sys.path[:] = path
        forget_user_modules()


@pytest.fixture
def user_imports():
    """`user_code_imported` around a test."""
    with user_code_imported():
        yield


def main_here(*args) -> None:
    """`tfyard ARGS` through `cli.main` in this process, for a run a module's tests share
    (no capture fixture at that scope), asserting it succeeded; the `tfyard` logger it
    configures and the user's modules it imports are undone after, as for a test."""
    from tfyard.cli import main

    with tfyard_logger_kept(), user_code_imported():
        assert main([str(arg) for arg in args]) == 0


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def assert_learned(output_dir: Path) -> None:
    """Loss fell and training accuracy beats chance (0.1) clearly; the validation figures
    of a run this short mostly measure how far batch-norm averages lag, so they are only
    checked to exist."""
    records = read_jsonl(output_dir / "metrics.jsonl")
    train = [r for r in records if r["kind"] == "train"]
    assert train[-1]["loss"] < train[0]["loss"]
    assert max(r["top1"] for r in train[-2:]) > 0.3
    evaluated = read_json(output_dir / "summary.json")["eval"]
    assert 0.0 <= evaluated["top1"] <= evaluated["top5"] <= 1.0


def train(output_dir: Path, work_dir: Path, *extra, env=None):
    result = run_tfyard("train", *FAST, "--output_dir", output_dir, "--work_dir", work_dir,
                        *extra, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def write_applications_h5(model, path: Path) -> None:
    """`model`'s weights in the layout of Keras Applications' ImageNet weight files (Keras
    2's `save_weights` to .h5): a group per layer, its `weight_names`, a dataset each."""
    import h5py

    with h5py.File(path, "w") as handle:
        handle.attrs["layer_names"] = [layer.name.encode() for layer in model.layers]
        handle.attrs["backend"], handle.attrs["keras_version"] = b"tensorflow", b"2.2.4"
        for layer in model.layers:
            group = handle.create_group(layer.name)
            names = [f"{layer.name}/{weight.name}:0" for weight in layer.weights]
            group.attrs["weight_names"] = [name.encode() for name in names]
            for name, weight in zip(names, layer.weights, strict=True):
                group.create_dataset(name, data=weight.numpy())
