"""The classic scripts run with their historical command lines on data in the true formats.

A script whose job is a cluster member's or a strategy's own process runs in a fresh
interpreter; the others run as `__main__` in this one (`script_here`): the same file and
argv, without an interpreter and a TensorFlow import to pay."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.data.helpers import image_bytes, tf_example, write_cifar, write_imagenet, write_records
from tests.train.conftest import read_json
from tfyard.launch.ports import reserved_ports

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = ["--num_gpus=0", "--train_steps=4", "--steps_per_loop=2", "--quiet", "--no_export",
         "--no_jit_compile"]  # XLA compile time dominates 4 steps on 2 cores


def script(name, *args, env=None, timeout=600):
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *map(str, args)],
                            capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def script_here(capsys, name, *args) -> str:
    """`python examples/NAME ARGS` run as `__main__` in this process; what it printed. The
    example modules it imported by path (`--model mnist.py:build`) are forgotten after."""
    capsys.readouterr()
    path = list(sys.path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", [str(EXAMPLES / name), *map(str, args)])
        try:
            with pytest.raises(SystemExit) as exited:
                runpy.run_path(str(EXAMPLES / name), run_name="__main__")
        finally:
            sys.path[:] = path
            for module, loaded in list(sys.modules.items()):
                if (getattr(loaded, "__file__", None) or "").startswith(str(EXAMPLES)):
                    del sys.modules[module]
    out, err = capsys.readouterr()
    assert exited.value.code == 0, err[-3000:]
    return out


def test_imagenet_main_classic_flags(tmp_path, capsys):
    data = tmp_path / "imagenet"
    write_imagenet(data, {"train": [[1, 2, 3, 4] * 2, [5, 6, 7, 8] * 2],
                          "validation": [[1, 2, 3, 4]]})
    out = tmp_path / "out"
    script_here(capsys, "imagenet_main.py", f"--data_dir={data}", f"--output-dir={out}",
                "--train-batch-size=8", "--resnet_size=18", "--image_size=32", *SMALL)
    summary = read_json(out / "summary.json")
    assert summary["model"] == "resnet18" and summary["dataset"] == "imagenet"
    assert summary["global_batch"] == 8 and summary["final_step"] == 4
    assert summary["num_classes"] == 1000


def test_resnet_cifar_main_multi_worker_mirrored_flag(tmp_path):
    data = tmp_path / "cifar-10-batches-bin"
    labels = list(range(10)) * 4
    write_cifar(data, "cifar10", {**{f"data_batch_{i}.bin": labels for i in range(1, 6)},
                                  "test_batch.bin": labels})
    out = tmp_path / "out"
    script("resnet_cifar_main.py", f"--data_dir={data}", f"--output_dir={out}",
           "--num_gpus=0", "--train_epochs=1", "--ds=multi_worker_mirrored",
           "--batch_size=50", "--resnet_size=8", "--quiet", "--no_export", "--no_jit_compile")
    summary = read_json(out / "summary.json")   # the flags' mapping is the point, not the size
    assert (summary["model"], summary["strategy"]) == ("cifar_resnet8",
                                                       "multi_worker_mirrored")
    assert summary["final_step"] == 4 and summary["steps_per_epoch"] == 4   # 200 images / 50


def write_mnist_npz(data: Path, count=256):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, count).astype(np.uint8)
    images = np.zeros((count, 28, 28), np.uint8)
    for i, label in enumerate(labels):       # a bar whose position is the label
        images[i, 2 + 2 * label: 5 + 2 * label, 4:24] = 255
    data.mkdir()
    np.savez(data / "mnist.npz", x_train=images, y_train=labels,
             x_test=images[:64], y_test=labels[:64])


def test_mnist_saves_h5(tmp_path, capsys):
    data = tmp_path / "mnist"
    write_mnist_npz(data)
    out = tmp_path / "out"
    script_here(capsys, "mnist.py", f"--data_dir={data}", f"--output_dir={out}", "--num_gpus=0",
                "--train_steps=20", "--batch_size=32", "--quiet", "--no_jit_compile")
    import keras

    model = keras.models.load_model(out / "mnist.h5", compile=False)
    assert model.output_shape == (None, 10)
    summary = read_json(out / "summary.json")
    assert summary["model"].endswith("mnist.py:build") and summary["optimizer"] == "Adam"
    assert summary["eval"]["accuracy"] > 0.3   # the tutorial's compiled metric, by its name


def test_mnist_dist_with_tf1_flags_runs_as_a_cluster_member(tmp_path):
    data = tmp_path / "mnist"
    write_mnist_npz(data)
    out = tmp_path / "out"
    with reserved_ports(1) as (port,):
        script("mnist_dist.py", f"--worker_hosts=127.0.0.1:{port}", "--job_name=worker",
               "--task_index=0", f"--data_dir={data}", f"--output_dir={out}", *SMALL)
    summary = read_json(out / "summary.json")
    assert summary["role"] == "worker" and summary["final_step"] == 4
    assert (out / "mnist.h5").exists() is False      # --no_export: nothing to copy


def slim_records(data: Path) -> None:
    """Three classes of flat colours as slim-style TFRecords with labels.txt."""
    data.mkdir()
    pixels = [np.full((32, 32, 3), 40 * c, np.uint8) for c in range(3)]
    write_records(data / "flowers_train_00000-of-00001.tfrecord",
                  [tf_example(image_bytes(pixels[i % 3]), i % 3) for i in range(24)])
    write_records(data / "flowers_validation_00000-of-00001.tfrecord",
                  [tf_example(image_bytes(pixels[i % 3]), i % 3) for i in range(6)])
    (data / "labels.txt").write_text("0:daisy\n1:rose\n2:tulip\n")


@pytest.mark.parametrize("model", ["vgg_19"])
def test_train_image_classifier_slim_flags(tmp_path, capsys, model):
    """Slim's flags train the model named (without XLA's compile: not the point here)."""
    data = tmp_path / "flowers"
    slim_records(data)
    out = tmp_path / "train_dir"
    script_here(capsys, "train_image_classifier.py", f"--model_name={model}", "--batch_size=4",
                f"--dataset_dir={data}", f"--train_dir={out}", "--num_clones=0",
                "--max_number_of_steps=2", "--image_size=32", "--quiet", "--no_export",
                "--no_jit_compile")
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["model"], summary["num_classes"], summary["final_step"]) == (model, 3, 2)


def run_weights(run: Path) -> dict:
    from tfyard.train.weights.weight_files import open_source

    with open_source(str(run)) as source:
        return {key: source.read(key) for key in source.shapes}


def test_slim_fine_tune_flags_start_from_an_applications_file_without_its_top(tmp_path,
                                                                             capsys):
    """Slim's README recipe on tfyard: the ImageNet-style weight file of the base (Keras
    Applications' layout, no top, written here), the logits excluded and the only layer
    trained; every other layer ends bit-equal to the file."""
    import keras

    from tests.train.conftest import write_applications_h5

    base = keras.applications.MobileNet(alpha=0.25, include_top=False, weights=None,
                                        input_shape=(32, 32, 3))
    rng = np.random.default_rng(0)
    for weight in base.weights:
        weight.assign(np.abs(rng.normal(size=weight.shape)).astype("float32"))
    weights = tmp_path / "mobilenet_2_5_224_tf_no_top.h5"
    write_applications_h5(base, weights)
    slim_records(tmp_path / "flowers")
    out = tmp_path / "train_dir"
    printed = script_here(capsys, "train_image_classifier.py", "--model_name=mobilenet_v1_025",
                          "--batch_size=4", f"--dataset_dir={tmp_path / 'flowers'}",
                          f"--train_dir={out}", "--num_clones=0", "--max_number_of_steps=2",
                          "--image_size=32", "--no_export", f"--checkpoint_path={weights}",
                          "--checkpoint_exclude_scopes=conv_preds",
                          "--trainable_scopes=conv_preds", "--ignore_missing_vars=True",
                          "--no_jit_compile")
    count = len(base.weights)
    assert (f"initialized from {weights}: {count} of {count + 2} weights; 2 excluded "
            "(--init_exclude); frozen: conv1, conv1_bn, conv_dw_1, ...") in printed
    after = run_weights(out)
    assert all(np.array_equal(after[w.path], w.numpy()) for w in base.weights)
    assert read_json(out / "run.json")["init"]["format"] == "legacy .h5"


def test_imagenet_main_pretrained_checkpoint_and_fine_tune(tmp_path, capsys):
    """The official ResNet's flags: every weight but the final dense layer's is loaded (the
    same 1000 classes included), and only that layer trains."""
    from tfyard.models import create_model

    source = create_model("resnet18", 1000, (32, 32, 3))
    for weight in source.weights:
        weight.assign(weight.numpy() + 0.5)
    weights = tmp_path / "resnet18.weights.h5"
    source.save_weights(weights)
    data = tmp_path / "imagenet"
    write_imagenet(data, {"train": [[1, 2, 3, 4] * 2], "validation": [[1, 2, 3, 4]]})
    out = tmp_path / "out"
    printed = script_here(capsys, "imagenet_main.py", f"--data_dir={data}",
                          f"--model_dir={out}", "--train-batch-size=8", "--resnet_size=18",
                          "--image_size=32", f"--pretrained_model_checkpoint_path={weights}",
                          "--fine_tune", *[flag for flag in SMALL if flag != "--quiet"])
    count = len(source.weights)
    assert (f"initialized from {weights}: {count - 2} of {count} weights; head started fresh "
            "(--init_fresh_head); frozen:") in printed
    after = run_weights(out)
    head = [w.path for w in source.weights][-2:]
    assert all(np.array_equal(after[w.path], w.numpy()) for w in source.weights
               if w.path not in head)
    assert not np.array_equal(after[head[0]], source.weights[-2].numpy())
