"""README's "Train your own Keras model" as written: its `nets/mine.py`, its `tfyard train`
command line and its `tfyard.fit` call, run in a fresh directory with CIFAR-10 binary files
and an input function written here (the README leaves those to the user)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.data.helpers import write_cifar
from tests.train.conftest import read_json

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
SECTION = README.split("## Train your own Keras model", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", SECTION, flags=re.S)

INPUT = """
import numpy as np
import tensorflow as tf

def input_fn(input_context):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8, 8, 1)).astype("float32")
    y = (x.mean(axis=(1, 2, 3)) > 0).astype("int32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)

eval_fn = input_fn
"""


def blocks(language: str) -> list[str]:
    return [text for lang, text in BLOCKS if lang == language]


def commands(text: str) -> list[list[str]]:
    """The block's command lines, continuations joined and comments dropped."""
    lines = text.replace("\\\n", " ").splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.strip()]


def test_the_readme_user_model_example_runs_as_written(tmp_path):
    module, = [b for b in blocks("python") if b.startswith("# nets/mine.py")]
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "mine.py").write_text(module)
    labels = list(range(10)) * 4
    write_cifar(tmp_path / "cifar-10-batches-bin", "cifar10",
                {**{f"data_batch_{i}.bin": labels for i in range(1, 6)},
                 "test_batch.bin": labels})

    train = commands(blocks("sh")[0])[0]
    assert train[:2] == ["tfyard", "train"], train
    result = subprocess.run([sys.executable, "-m", "tfyard", *train[1:]], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_json(tmp_path / "out" / "summary.json")
    assert (summary["model"], summary["dataset"]) == ("nets.mine:build", "cifar10")
    assert summary["optimizer"] == "Adam" and "accuracy" in summary["eval"]

    call, = [b for b in blocks("python") if "tfyard.fit(" in b]
    script = "from nets.mine import build\n" + INPUT + call + \
        "print(summary['final_step'], summary['dataset'], sorted(summary['eval']))\n"
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-4:] == ["1000", "input_fn", "['accuracy',", "'loss']"]
    assert read_json(tmp_path / "out_fit" / "summary.json")["final_step"] == 1000
