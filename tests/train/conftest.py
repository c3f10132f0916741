"""Shared helpers for training tests: small real runs on the bundled digits."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_tfyard

# Small enough for 2 CPU cores, big enough that learning shows: 16x16 digits, batch 32.
FAST = ["--model", "cifar_resnet8", "--dataset", "digits", "--image_size", "16",
        "--batch_size", "32", "--learning_rate", "0.05", "--num_gpus", "0", "--seed", "3",
        "--steps_per_loop", "5", "--quiet",
        # ResNet-8 (batch norm and residuals like ResNet-20, a third of the layers) without
        # XLA: 11 s a process on 2 cores instead of 25 s. The tests about XLA (bench, demo,
        # the loop's unit tests, the resume-settings warning) turn it on.
        "--no_jit_compile"]


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
