"""The GPU slice (`make gpu`): the whole program on a GPU, where everything that differs from
the CPU path is exercised: training from ImageNet-format JPEG shards in float32, bfloat16 and
float16 (loss scaling), with and without XLA; SIGTERM and resume; evaluate, predict and the
export reloaded on the CPU; a user's own model through `tfyard.fit`; MirroredStrategy over two
logical GPUs carved from one card; `tfyard tune --parallel 2` sharing the card; `bench`.
Skipped where TensorFlow sees no GPU (every CI machine). The tests share the card, so each
child runs with memory growth on (as tune's trials do)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import STARTED_WITH_DEVICES
from tests.train.conftest import read_json, read_jsonl

pytestmark = pytest.mark.gpu

MODEL = ["--model", "cifar_resnet8", "--dataset", "imagenet", "--image_size", "32",
         "--batch_size", "64", "--learning_rate", "0.05", "--steps_per_loop", "5"]
TRAIN = [*MODEL, "--num_gpus", "1"]
TOP1 = "validation/top1"

SERVE = """
import json, sys
import tensorflow as tf
served = tf.saved_model.load(sys.argv[1])
images = [open(p, "rb").read() for p in sorted(sys.argv[2:])]
result = served.signatures["serving_default"](image_bytes=tf.constant(images))
print(json.dumps({"gpus": len(tf.config.list_physical_devices("GPU")),
                  "probabilities": result["probabilities"].numpy().tolist()}))
"""

LOGICAL = """
import sys
import tensorflow as tf
card = tf.config.list_physical_devices("GPU")[0]
tf.config.set_logical_device_configuration(
    card, [tf.config.LogicalDeviceConfiguration(memory_limit=4096)] * 2)
from tfyard import cli
sys.argv[1:] = ["train", *sys.argv[1:]]
cli.run()
"""

FIT = """
import sys
import keras
import tfyard

def build(num_classes, input_shape):
    model = keras.Sequential([keras.Input(input_shape),
                              keras.layers.Conv2D(16, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(num_classes)])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model

summary = tfyard.fit(build, "imagenet", data_dir=sys.argv[1], output_dir=sys.argv[2],
                     image_size=32, batch_size=64, train_steps=20, num_gpus=1)
print("FIT", summary["final_step"], summary["replicas"])
"""


def device_env(gpu: bool, growth: bool = True) -> dict:
    """This environment with the suite's own GPUs (gpu) or none; memory growth on, so the
    tests that run at once share the card."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH")}
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif STARTED_WITH_DEVICES is not None:
        env["CUDA_VISIBLE_DEVICES"] = STARTED_WITH_DEVICES
    if growth:
        env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    return env


def run(argv: list, gpu: bool = True, growth: bool = True) -> str:
    """`python ARGV` on the GPU (or the CPU), which must succeed; its stdout and stderr."""
    result = subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True,
                            env=device_env(gpu, growth), timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    return output


def last_json(output: str) -> dict:
    """The last JSON object a child printed (TensorFlow's log lines come on stderr)."""
    return json.loads([line for line in output.splitlines() if line.startswith("{")][-1])


def first_line(output: str) -> str:
    """The announcement of the run: the model, the strategy, the dtype, XLA, the devices."""
    return next(line for line in output.splitlines()
                if "tfyard: " in line and "replica(s)" in line)


def train_records(run_dir: Path) -> list[dict]:
    return [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["kind"] == "train"]


@pytest.fixture(scope="module")
def gpu():
    found = run(["-c", "import tensorflow as tf; "
                 "print('GPUS', len(tf.config.list_physical_devices('GPU')))"])
    if int(found.split("GPUS")[-1].split()[0]) == 0:
        pytest.skip("TensorFlow sees no GPU here")


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """ImageNet-named shards of real JPEGs (the digits, 32x32 colour, labels 1-10), and 100
    of the validation images as plain files (`jpegs/`)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    from tests.data.helpers import image_bytes, tf_example, write_records

    root = tmp_path_factory.mktemp("imagenet")
    digits = load_digits()
    pixels = [np.asarray(Image.fromarray((image * 15).astype(np.uint8)).resize((32, 32)))
              for image in digits.images]
    pixels = [np.stack([p, 255 - p, p // 2], axis=-1) for p in pixels]
    labels = [int(label) + 1 for label in digits.target]
    records = [tf_example(image_bytes(p), label) for p, label in zip(pixels, labels,
                                                                      strict=True)]
    write_records(root / "train-00000-of-00002", records[:750])
    write_records(root / "train-00001-of-00002", records[750:1500])
    write_records(root / "validation-00000-of-00001", records[1500:])
    (root / "jpegs").mkdir()
    for i, p in enumerate(pixels[1500:1600]):
        (root / "jpegs" / f"{i:03d}.jpg").write_bytes(image_bytes(p))
    return root


@pytest.mark.parametrize("xla", ["--xla", "--no_xla"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_training_on_jpeg_shards_names_the_gpu_and_the_loss_falls(gpu, shards, tmp_path,
                                                                   dtype, xla):
    output = run(["-m", "tfyard", "train", *TRAIN, "--data_dir", shards, "--output_dir",
                  tmp_path, "--train_steps", "30", "--dtype", dtype, xla, "--no_export"])
    line = first_line(output)
    assert "on 1 GPU: " in line and f", {dtype}, " in line, line
    assert ("no XLA" not in line) == (xla == "--xla"), line
    summary = read_json(tmp_path / "summary.json")
    assert summary["dtype"] == dtype and summary["jit_compile"] == (xla == "--xla")
    assert summary["final_step"] == 30
    records = train_records(tmp_path)
    assert all(np.isfinite(r["loss"]) for r in records)
    assert records[-1]["loss"] < records[0]["loss"], records


def test_sigterm_saves_and_the_resume_goes_on_saying_what_seed_keeps(gpu, shards,
                                                                      tmp_path):
    """SIGTERM saves and exits 143; the rerun resumes there. --seed's promise on a GPU is
    said in the first line; whether the weights matched an unbroken run is printed."""
    common = ["-m", "tfyard", "train", *TRAIN, "--data_dir", shards, "--seed", "3",
              "--train_steps", "60", "--no_export", "--xla"]
    broken, unbroken = tmp_path / "broken", tmp_path / "unbroken"
    child = subprocess.Popen([sys.executable, *map(str, common), "--output_dir", broken],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=device_env(True))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and child.poll() is None:
        metrics = broken / "metrics.jsonl"
        if metrics.exists() and any(r["step"] >= 10 for r in train_records(broken)):
            break
        time.sleep(0.2)
    child.send_signal(signal.SIGTERM)
    output = child.communicate(timeout=120)[0]
    assert child.returncode == 143, output[-3000:]
    assert "--seed on a GPU" in first_line(output)
    resumed = run([*common, "--output_dir", broken])
    assert "resumed from step" in resumed, resumed[-3000:]
    assert read_json(broken / "summary.json")["final_step"] == 60
    run([*common, "--output_dir", unbroken])
    same = (read_json(broken / "summary.json")["weights_digest"]
            == read_json(unbroken / "summary.json")["weights_digest"])
    print(f"GPU resume with --seed bit-exact: {same}")


def test_evaluate_predict_and_the_export_agree_on_gpu_and_cpu(gpu, shards, tmp_path):
    run(["-m", "tfyard", "train", *TRAIN, "--data_dir", shards, "--output_dir", tmp_path,
         "--train_steps", "40", "--xla"])
    evaluated = run(["-m", "tfyard", "evaluate", "--output_dir", tmp_path])
    assert TOP1 in evaluated or "top1" in evaluated, evaluated[-2000:]
    predictions = tmp_path / "predictions.csv"
    run(["-m", "tfyard", "predict", "--output_dir", tmp_path, shards / "jpegs", "--output",
         predictions])
    with open(predictions, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 100 and not any(row["error"] for row in rows), rows[:2]

    jpegs = sorted(str(p) for p in (shards / "jpegs").iterdir())
    export = tmp_path / "export" / "saved_model"
    on_gpu = last_json(run(["-c", SERVE, export, *jpegs]))
    on_cpu = last_json(run(["-c", SERVE, export, *jpegs], gpu=False))
    assert on_gpu["gpus"] >= 1 and on_cpu["gpus"] == 0
    gpu_p, cpu_p = np.array(on_gpu["probabilities"]), np.array(on_cpu["probabilities"])
    assert gpu_p.shape == (100, gpu_p.shape[1])
    print(f"export on GPU vs CPU: max |p_gpu - p_cpu| = {np.abs(gpu_p - cpu_p).max():.2e}")
    assert (gpu_p.argmax(1) == cpu_p.argmax(1)).all()
    np.testing.assert_allclose(gpu_p, cpu_p, atol=1e-3)


def test_fit_trains_a_users_own_model_on_the_gpu(gpu, shards, tmp_path):
    output = run(["-c", FIT, shards, tmp_path])
    assert "FIT 20 1" in output, output[-3000:]
    assert "on 1 GPU: " in first_line(output)


def test_mirrored_over_two_logical_gpus_of_one_card(gpu, shards, tmp_path):
    """Two logical GPUs of one card: MirroredStrategy with 2 replicas, which reduce through
    one device (NCCL refuses two ranks on one GPU). Memory limits, not growth, bound them."""
    output = run(["-c", LOGICAL, *MODEL, "--num_gpus", "2", "--data_dir", shards, "--output_dir",
                  tmp_path, "--train_steps", "20", "--no_export"], growth=False)
    line = first_line(output)
    assert "mirrored with 2 replica(s)" in line and "carved from 1 card" in line, line
    summary = read_json(tmp_path / "summary.json")
    assert summary["replicas"] == 2 and summary["final_step"] == 20


def test_tune_runs_two_trials_at_once_on_the_card(gpu, shards, tmp_path):
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"weight_decay": {"choice": [0.0001, 0.0005]}, "epochs": 1}))
    study = tmp_path / "study"
    output = run(["-m", "tfyard", "tune", "--space", space, "--metric", TOP1, "--mode", "max",
                  "--trials", "2", "--parallel", "2", "--sampler", "grid", "--output_dir",
                  study, *MODEL, "--data_dir", shards, "--no_export"], growth=False)
    tune_line = next(line for line in output.splitlines() if line.startswith("tune: "))
    assert "2 trials share GPU(s) 0" in tune_line or "own GPU" in tune_line, tune_line
    assert output.count(" on GPU(s) ") >= 2, output[-3000:]
    for log in sorted((study / "logs").glob("*.log")):
        line = first_line(log.read_text())
        assert "on 1 GPU: " in line and "memory growth on" in line, line
    assert read_json(study / "tune.json")["best_value"] is not None


def test_bench_names_the_gpu_and_measures_it(gpu, shards):
    trained = last_json(run(["-m", "tfyard", "bench", "train", "--model", "cifar_resnet8",
                             "--dataset", "imagenet", "--data", shards, "--image_size", "32",
                             "--batch_size", "64", "--steps", "20", "--warmup_steps", "10",
                             "--json"]))
    assert trained["devices"].startswith("on 1 GPU: ") and trained["images_per_sec"] > 0
    assert trained["peak_memory_of"] == "GPU:0"
    read = last_json(run(["-m", "tfyard", "bench", "data", "--dataset", "imagenet",
                          "--data_dir", shards, "--image_size", "32", "--batch_size", "64",
                          "--json"]))
    assert read["images_per_sec"] > 0
