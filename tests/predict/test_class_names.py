"""The dataset registry names the classes where the data does, in class-id order."""

from __future__ import annotations

import numpy as np

from tests.data.helpers import image_bytes, tf_example, write_cifar, write_idx, write_records
from tfyard.data import dataset_info


def test_cifar_names_come_from_batches_meta(tmp_path):
    write_cifar(tmp_path, "cifar10", {"data_batch_1.bin": [0, 1], "test_batch.bin": [2]})
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
             "truck"]
    (tmp_path / "batches.meta.txt").write_text("\n".join(names) + "\n\n")
    assert dataset_info("cifar10", str(tmp_path)).class_names == tuple(names)


def test_slim_and_imagenet_names_come_from_labels_txt(tmp_path):
    record = tf_example(image_bytes(np.zeros((8, 8, 3), np.uint8)), 1)
    for split in ("train", "validation"):
        write_records(tmp_path / f"x_{split}.tfrecord", [record])
        write_records(tmp_path / f"{split}-00000-of-00001", [record])
    (tmp_path / "labels.txt").write_text("0:background\n1:tench\n2:goldfish\n")
    assert dataset_info("tfrecord", str(tmp_path)).class_names == (
        "background", "tench", "goldfish")
    # ImageNet's stored labels start at 1: class 0 is the name of label 1
    info = dataset_info("imagenet", str(tmp_path), cache_dir=str(tmp_path))
    assert info.class_names[:2] == ("tench", "goldfish")


def test_digits_and_mnist_are_named_by_their_digit(digits_work, tmp_path):
    assert dataset_info("digits", cache_dir=str(digits_work)).class_names == tuple("0123456789")
    images, labels = np.zeros((2, 28, 28), np.uint8), np.array([3, 4], np.uint8)
    for prefix in ("train", "t10k"):
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", labels)
    assert dataset_info("mnist", str(tmp_path)).class_names == tuple("0123456789")
