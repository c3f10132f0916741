"""Every reader on files written here in the true on-disk format; labels checked exactly."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.data.helpers import (
    collect,
    image_bytes,
    mnist_arrays,
    tf_example,
    write_cifar,
    write_folder,
    write_idx,
    write_imagenet,
    write_records,
)
from tfyard.data import build_dataset, dataset_info, preprocess

IMAGENET_MEAN, IMAGENET_STD = (np.array(s) for s in preprocess.IMAGENET_STATS)


def red(images, stats=preprocess.IMAGENET_STATS):
    """Mean red channel per image back on the 0..255 scale."""
    mean, std = stats
    return images[..., 0].astype(np.float32).mean(axis=(1, 2)) * std[0] + mean[0]


def test_digits_written_once_and_read_as_tfrecords(digits_cache):
    from sklearn.datasets import load_digits

    info = dataset_info("digits", cache_dir=digits_cache)
    assert (info.num_classes, info.image_shape) == (10, (32, 32, 3))
    assert info.num_examples == {"train": 1497, "validation": 300}
    labels = np.concatenate([  # 1497 = 3 * 499: training batches drop no remainder
        collect(build_dataset("digits", split, batch_size=batch, cache_dir=digits_cache,
                              repeat=False, shuffle=False))[1]
        for split, batch in (("train", 499), ("validation", 100))])
    assert np.array_equal(np.bincount(labels), np.bincount(load_digits().target))
    images, _ = collect(build_dataset("digits", "validation", batch_size=64,
                                      cache_dir=digits_cache))
    assert images.shape == (300, 32, 32, 3)
    assert abs(images.mean()) < 0.2 and 0.8 < images.std() < 1.2
    shard = os.path.join(digits_cache, "digits", "digits_train_00000-of-00001.tfrecord")
    before = os.stat(shard).st_mtime_ns
    train = build_dataset("digits", "train", batch_size=32, cache_dir=digits_cache, seed=1)
    x, y = next(iter(train))
    assert x.shape == (32, 32, 32, 3) and y.dtype == tf.int32
    assert os.stat(shard).st_mtime_ns == before


@pytest.fixture
def imagenet_dir(tmp_path):
    write_imagenet(tmp_path, {"train": [[1, 2, 3], [4, 5]], "validation": [[5, 4, 3, 2, 1]]},
                   box=(0.1, 0.1, 0.9, 0.9))
    return str(tmp_path)


def test_imagenet_eval_labels_images_and_counts(imagenet_dir):
    info = dataset_info("imagenet", imagenet_dir)
    assert info.num_classes == 1000 and info.num_examples == {"train": 5, "validation": 5}
    images, labels = collect(build_dataset("imagenet", "validation", imagenet_dir,
                                           batch_size=2, image_size=16))
    assert images.shape == (5, 16, 16, 3)  # eval keeps the remainder
    assert labels.tolist() == [4, 3, 2, 1, 0]  # 1-based on disk, offset -1
    np.testing.assert_allclose(red(images), 20 * (labels + 1), atol=3)
    _, raw = collect(build_dataset("imagenet", "test", imagenet_dir, batch_size=5,
                                   label_offset=0))
    assert raw.tolist() == [5, 4, 3, 2, 1]


def test_imagenet_training_batches(imagenet_dir):
    dataset = build_dataset("imagenet", "train", imagenet_dir, batch_size=4, image_size=24,
                            dtype="bfloat16", data_threads=2)
    seen = set()
    for images, labels in dataset.take(6):  # repeats; drop_remainder keeps shapes static
        assert images.shape == (4, 24, 24, 3) and images.dtype == tf.bfloat16
        seen |= set(labels.numpy().tolist())
    assert seen == {0, 1, 2, 3, 4}
    assert dataset.element_spec[0].shape.as_list() == [4, 24, 24, 3]


def test_shards_by_file_or_by_record(imagenet_dir):
    def labels(split, pipeline):
        context = tf.distribute.InputContext(2, pipeline, 2)
        return sorted(collect(build_dataset("imagenet", split, imagenet_dir, batch_size=1,
                                            input_context=context, repeat=False,
                                            shuffle=False))[1].tolist())

    assert (labels("train", 0), labels("train", 1)) == ([0, 1, 2], [3, 4])  # two files
    first, second = labels("validation", 0), labels("validation", 1)  # one file: by record
    assert sorted(first + second) == [0, 1, 2, 3, 4] and len(first) == 3


def test_slim_tfrecord_png_and_labels_txt(tmp_path):
    for split, labels in (("train", [0, 1, 2, 2]), ("validation", [2, 0])):
        write_records(tmp_path / f"shapes_{split}_00000-of-00001.tfrecord",
                      [tf_example(image_bytes(np.full((20, 30, 3), 20 * lab, np.uint8), "PNG"),
                                  lab) for lab in labels])
    (tmp_path / "labels.txt").write_text("0:circle\n1:square\n2:star\n")
    info = dataset_info("tfrecord", str(tmp_path))
    assert info.num_classes == 3 and info.num_examples == {"train": 4, "validation": 2}
    images, labels = collect(build_dataset("tfrecord", "validation", str(tmp_path),
                                           batch_size=8, image_size=8))
    assert labels.tolist() == [2, 0]
    np.testing.assert_allclose(red(images), [40, 0], atol=1)
    x, _ = next(iter(build_dataset("tfrecord", "train", str(tmp_path), batch_size=3,
                                   image_size=8)))
    assert x.shape == (3, 8, 8, 3)


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_binary_records(tmp_path, name):
    if name == "cifar10":
        files = {f"data_batch_{i}.bin": [i, (2 * i) % 10] for i in range(1, 6)}
        files["test_batch.bin"] = [9, 0, 3]
        root = tmp_path / "cifar-10-batches-bin"  # the archive's folder is found too
    else:
        files = {"train.bin": [57, 99, 0, 12], "test.bin": [42, 3, 99]}
        root = tmp_path
    write_cifar(root, name, files)
    info = dataset_info(name, str(tmp_path))
    train_count = sum(len(v) for k, v in files.items() if "test" not in k)
    assert info.num_examples == {"train": train_count, "validation": 3}
    assert info.num_classes == (10 if name == "cifar10" else 100)
    images, labels = collect(build_dataset(name, "validation", str(tmp_path), batch_size=2))
    expected = files["test_batch.bin" if name == "cifar10" else "test.bin"]
    assert labels.tolist() == expected and images.shape == (3, 32, 32, 3)
    mean, std = (np.array(s) for s in preprocess.CIFAR_STATS)
    pixels = images[:, 5, 5, :] * std + mean
    np.testing.assert_allclose(pixels, [[(10 * lab) % 256, 7, 200] for lab in expected], atol=0.01)
    _, train_labels = collect(build_dataset(name, "train", str(tmp_path), batch_size=1,
                                            repeat=False))
    assert sorted(train_labels.tolist()) == sorted(
        lab for k, v in files.items() if "test" not in k for lab in v)


def test_mnist_npz_and_idx_agree(tmp_path):
    (x_train, y_train), (x_test, y_test) = mnist_arrays(12, 0), mnist_arrays(5, 1)
    npz, idx = tmp_path / "npz", tmp_path / "idx"
    npz.mkdir(), idx.mkdir()
    np.savez(npz / "mnist.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    for prefix, x, y in (("train", x_train, y_train), ("t10k", x_test, y_test)):
        write_idx(idx / f"{prefix}-images-idx3-ubyte.gz", x)
        write_idx(idx / f"{prefix}-labels-idx1-ubyte.gz", y)
    for root in (npz, idx):
        info = dataset_info("mnist", str(root))
        assert info.num_examples == {"train": 12, "validation": 5}
        assert info.image_shape == (28, 28, 1)
        images, labels = collect(build_dataset("mnist", "validation", str(root), batch_size=2))
        assert labels.tolist() == y_test.tolist() and images.shape == (5, 28, 28, 1)
        mean, std = preprocess.MNIST_STATS
        np.testing.assert_allclose(images[:, 3, 3, 0] * std[0] + mean[0], 25 * y_test,
                                   atol=0.01)
    x, _ = next(iter(build_dataset("mnist", "train", str(idx), batch_size=5, image_size=32)))
    assert x.shape == (5, 32, 32, 1)


def test_folder_of_class_subfolders(tmp_path):
    write_folder(tmp_path / "train", {"ant": 2, "bee": 3, "cat": 1}, fmt="PNG")
    write_folder(tmp_path / "validation", {"ant": 1, "bee": 1, "cat": 2})
    info = dataset_info("folder", str(tmp_path))
    assert info.num_classes == 3 and info.num_examples == {"train": 6, "validation": 4}
    images, labels = collect(build_dataset("folder", "validation", str(tmp_path),
                                           batch_size=3, image_size=16))
    assert labels.tolist() == [0, 1, 2, 2]
    np.testing.assert_allclose(red(images), 20 * labels, atol=3)
    _, train = collect(build_dataset("folder", "train", str(tmp_path), batch_size=1,
                                     image_size=16, repeat=False))
    assert sorted(train.tolist()) == [0, 0, 1, 1, 1, 2]


def test_synthetic_shapes_and_count():
    info = dataset_info("synthetic", num_examples=40)
    assert info.num_classes == 1000 and info.num_examples["train"] == 40
    dataset = build_dataset("synthetic", "validation", batch_size=8, image_size=16,
                            dtype="float16", num_examples=40)
    batches = list(dataset)
    assert len(batches) == 5
    assert batches[0][0].shape == (8, 16, 16, 3) and batches[0][0].dtype == tf.float16
    assert all(0 <= int(v) < 1000 for v in batches[0][1])


@pytest.mark.parametrize("name, shape, classes", [
    ("synthetic_cifar10", (32, 32, 3), 10), ("synthetic_cifar100", (32, 32, 3), 100),
    ("synthetic_mnist", (28, 28, 1), 10)])
def test_synthetic_twins_are_shaped_like_their_dataset(name, shape, classes):
    info = dataset_info(name)
    assert (info.image_shape, info.num_classes) == (shape, classes)
    images, labels = next(iter(build_dataset(name, "train", batch_size=64)))
    assert images.shape == (64, *shape) and int(tf.reduce_max(labels)) < classes


def test_every_synthetic_twin_is_registered():
    from tfyard.data.formats import REGISTRY
    from tfyard.data.formats.synthetic import SHAPES, twin

    assert {n for n, module in REGISTRY.items() if module == "synthetic"} == {
        twin(d) for d in SHAPES}
