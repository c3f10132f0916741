"""README's "Train your own Keras model" as written: its `nets/mine.py`, its `tfyard train`
command line and its `tfyard.fit` call, run in a fresh directory with CIFAR-10 binary files
and an input function written here (the README leaves those to the user); and its
"Fine-tune" recipe, both stages and the `tfyard.fit` form."""

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


FINE_TUNE = README.split("## Fine-tune: start from trained weights", 1)[1].split("\n## ", 1)[0]
SMALL_RUN = ["--image_size", "32", "--batch_size", "8", "--train_steps", "2", "--no_export"]


def test_the_readme_fine_tune_recipe_runs_as_written(tmp_path):
    """Both stages and the `tfyard.fit` form, with the ImageNet file written here in Keras
    Applications' layout (no top) and a small photo folder; each run made small by the
    flags appended to it."""
    import keras

    from tests.data.helpers import write_folder
    from tests.train.conftest import write_applications_h5

    fine_tune = re.findall(r"```(\w+)\n(.*?)```", FINE_TUNE, flags=re.S)
    shell, = [text for lang, text in fine_tune if lang == "sh"]
    stage1, stage2 = [command for command in commands(shell) if command]
    weights = stage1[stage1.index("--init_checkpoint") + 1]
    base = keras.applications.MobileNetV2(include_top=False, weights=None,
                                          input_shape=(32, 32, 3))
    write_applications_h5(base, tmp_path / weights)
    write_folder(tmp_path / "photos", {"cat": 8, "dog": 8})
    lines = []
    for command in (stage1, stage2):
        result = subprocess.run([sys.executable, "-m", "tfyard", *command[1:], *SMALL_RUN],
                                cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        lines += [line for line in result.stdout.splitlines() if "initialized from" in line]
    count = len(base.weights)
    assert lines[0].startswith(f"tfyard: initialized from {weights}: {count} of {count + 2} "
                               "weights; head started fresh (not in the source); frozen: ")
    assert lines[1] == f"tfyard: initialized from stage1: {count + 2} of {count + 2} weights"
    assert read_json(tmp_path / "stage2" / "run.json")["init"]["head"] == "loaded"

    call, = [text for lang, text in fine_tune if lang == "python"]
    call = call.replace("epochs=5,", "epochs=5, image_size=32, batch_size=8, train_steps=2, "
                                     "export=False,")
    result = subprocess.run([sys.executable, "-c", call], cwd=tmp_path, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    record = read_json(tmp_path / "mine" / "run.json")["init"]
    assert record["loaded"] == count and record["head"] == "fresh (not in the source)"
    assert len(record["frozen_layers"]) == len({w.path.split("/")[0] for w in base.weights})
