"""`tfyard evaluate` reads any split once, in order, whole, on every format, and refuses data
whose classes are not the run's before any work. The CLI runs in this process."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import run_here
from tests.data.helpers import (
    collect,
    image_bytes,
    mnist_arrays,
    tf_example,
    write_cifar,
    write_folder,
    write_imagenet,
    write_records,
)
from tests.train.conftest import main_here
from tfyard import platform
from tfyard.errors import UserError
from tfyard.train.evaluate import evaluate_output
from tfyard.train.options import TrainOptions
from tfyard.train.task.inputs import RegistryInput


def write_slim(root) -> None:
    for split, labels in (("train", [0, 1, 2, 2, 1]), ("validation", [2, 0])):
        write_records(root / f"shapes_{split}_00000-of-00001.tfrecord",
                      [tf_example(image_bytes(np.full((10, 12, 3), 20 * lab, np.uint8), "PNG"),
                                  lab) for lab in labels])
    (root / "labels.txt").write_text("0:circle\n1:square\n2:star\n")


def write_mnist(root) -> None:
    (x_train, y_train), (x_test, y_test) = mnist_arrays(7, 0), mnist_arrays(5, 1)
    np.savez(root / "mnist.npz", x_train=x_train, y_train=y_train, x_test=x_test,
             y_test=y_test)


WRITERS = {
    "imagenet": lambda root: write_imagenet(root, {"train": [[1, 2, 1], [2, 2]],
                                                   "validation": [[1, 2]]}),
    "tfrecord": write_slim,
    "cifar10": lambda root: write_cifar(root, "cifar10", {
        **{f"data_batch_{i}.bin": [i, 3] for i in range(1, 6)}, "test_batch.bin": [9, 0, 3]}),
    "mnist": write_mnist,
    "imagefolder": lambda root: write_folder(root, {"ant": 4, "bee": 7}),
    "digits": lambda root: None,
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_each_split_is_read_once_in_order_whole(tmp_path, name, digits_work):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    WRITERS[name](data_dir)
    plat = platform.resolve(None if name == "digits" else str(data_dir), str(tmp_path / "out"),
                            str(digits_work), create=False)
    data = RegistryInput(TrainOptions(dataset=name, image_size=8), plat)
    for split in ("train", "validation"):
        dataset = data.evaluation(tf.distribute.InputContext(), 3, split)
        assert int(dataset.cardinality()) != tf.data.INFINITE_CARDINALITY
        _, labels = collect(dataset)   # a repeated split would never end here
        assert len(labels) == data.info.num_examples[split], split   # the last batch kept
        assert collect(dataset)[1].tolist() == labels.tolist()      # no shuffle


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    """A 2-step run on a small image folder of named classes."""
    root = tmp_path_factory.mktemp("evaluate")
    write_folder(root / "data", {"ant": 6, "bee": 5})
    main_here("train", "--model", "cifar_resnet8", "--dataset", "imagefolder", "--data_dir",
              root / "data", "--image_size", "16", "--batch_size", "4", "--train_steps", "2",
              "--num_gpus", "0", "--no_jit_compile", "--no_export", "--quiet", "--output_dir",
              root / "out")
    return root


@pytest.mark.timeout(120, func_only=True)   # a repeated split would never end
def test_evaluate_on_the_training_split_ends_after_one_pass(folder_run, capsys):
    result = run_here(capsys, "evaluate", "--output_dir", folder_run / "out", "--split", "train")
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout)
    assert figures["split"] == "train" and 0.0 <= figures["top1"] <= 1.0


@pytest.mark.parametrize("classes, message", [
    ({"ant": 2, "bee": 2, "cat": 2}, r"holds 3 classes but the run was trained on 2; point "
                                     r"--data_dir at the data the run trained on"),
    ({"ant": 2, "bed": 2}, r"names its classes otherwise than the run: class 1 is 'bed' "
                           r"there, 'bee' in the run"),
    ({"ant": 1, "bee": 1}, r"the validation split of .* holds no examples; evaluate another "
                           r"--split, or add data"),
])
def test_data_that_is_not_the_runs_is_one_line_before_any_work(folder_run, tmp_path,
                                                               classes, message):
    write_folder(tmp_path, classes)
    with pytest.raises(UserError, match=message):
        evaluate_output(str(folder_run / "out"), "validation", data_dir=str(tmp_path))
