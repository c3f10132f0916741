"""Seeded input is a function of the global example number: resumes replay nothing and skip
nothing, every example is read once per epoch, and input pipelines split it without
changing it. Every reader, on real files."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf

from tests.data.helpers import (
    image_bytes,
    mnist_arrays,
    tf_example,
    write_cifar,
    write_folder,
    write_imagenet,
    write_records,
)
from tfyard.data import build_dataset
from tfyard.errors import UserError

READERS = ["digits", "cifar10", "mnist", "imagenet", "tfrecord", "folder", "synthetic"]


def write_slim(root) -> None:
    for shard, labels in enumerate(([0, 1, 2, 2, 1], [2, 0, 0], [1, 1, 0, 2])):
        write_records(root / f"shapes_train_{shard:05d}-of-00003.tfrecord",
                      [tf_example(image_bytes(np.full((20, 30, 3), 20 * lab + shard, np.uint8),
                                              "PNG"), lab) for lab in labels])
    (root / "labels.txt").write_text("0:circle\n1:square\n2:star\n")


@pytest.fixture
def source(request, tmp_path, digits_cache):
    """(dataset name, build_dataset keyword arguments, training examples) of one reader."""
    name = request.param
    options = {"data_dir": str(tmp_path), "image_size": 12}
    if name == "digits":
        return name, {"cache_dir": digits_cache}, 1497
    if name == "cifar10":
        write_cifar(tmp_path, name, {f"data_batch_{i}.bin": [i, 2 * i % 10, 7, i % 3]
                                     for i in range(1, 6)})
        return name, options, 20
    if name == "mnist":
        images, labels = mnist_arrays(19, 0)
        images[:, 0, :] = np.arange(19)[:, None]  # every image differs
        np.savez(tmp_path / "mnist.npz", x_train=images, y_train=labels, x_test=images,
                 y_test=labels)
        return name, options, 19
    if name == "imagenet":
        write_imagenet(tmp_path, {"train": [[1, 2, 3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 3]]},
                       box=(0.1, 0.1, 0.9, 0.9))
        return name, {**options, "cache_dir": str(tmp_path / "work")}, 13
    if name == "tfrecord":
        write_slim(tmp_path)
        return name, options, 12
    if name == "folder":
        write_folder(tmp_path / "train", {"ant": 4, "bee": 3, "cat": 5})
        write_folder(tmp_path / "validation", {"ant": 1, "bee": 1, "cat": 1})  # none held out
        return name, options, 12
    return name, {"image_size": 8, "num_examples": 24}, 24


def stream(name, options, batches, batch_size=4, **extra):
    """The first `batches` batches as (images, labels, ids) numpy arrays, batches joined."""
    dataset = build_dataset(name, "train", batch_size=batch_size, seed=7, with_ids=True,
                            **options, **extra)
    parts = list(zip(*((x.numpy(), y.numpy(), i.numpy())
                       for x, y, i in dataset.take(batches)), strict=True))
    return tuple(np.concatenate(p) for p in parts)


def assert_same(first, second) -> None:
    for a, b in zip(first, second, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)  # bit for bit, not close


@pytest.mark.parametrize("source", READERS, indirect=True)
def test_resume_reproduces_the_unbroken_stream(source):
    name, options, total = source
    batches = min(2 * total // 4 + 3, 12)  # past an epoch boundary where the data is small
    unbroken = stream(name, options, batches)
    assert_same(unbroken, stream(name, options, batches))  # same seed, same start
    for start in (6, 4 * batches - 8):  # mid-batch, and late (next epoch for small sets)
        resumed = stream(name, options, batches - (start + 3) // 4, start_example=start)
        assert_same(resumed, tuple(part[start:start + len(resumed[0])] for part in unbroken))
    other = build_dataset(name, "train", batch_size=4, seed=8, with_ids=True, **options)
    if name != "synthetic":
        assert not np.array_equal(next(iter(other))[2].numpy(), unbroken[2][:4])


@pytest.mark.parametrize("source", READERS[1:], indirect=True)  # digits: 1497 per epoch
def test_every_example_once_per_epoch_across_restarts(source):
    name, options, total = source
    # three segments, as a run killed twice would read them: steps 0-2, 3-6, 7-...
    ends = [3, 7, 3 * total // 4 + 1]
    segments = [stream(name, options, end - begin, start_example=4 * begin)[2]
                for begin, end in itertools.pairwise([0, *ends])]
    ids = np.concatenate(segments)
    for epoch in range(3):
        assert sorted(ids[epoch * total:(epoch + 1) * total]) == list(range(total))
    assert ids[:total].tolist() != ids[total:2 * total].tolist()  # a new order each epoch


@pytest.mark.parametrize("source", READERS, indirect=True)
def test_pipelines_split_the_same_stream(source):
    """Two pipelines (2 workers x 1 replica, or 2 parameter-server workers): per step, their
    per-replica batches concatenate to what one pipeline reads as the global batch."""
    name, options, total = source
    steps = min(total // 4 + 2, 8)
    for start_step in (0, 3):
        whole = stream(name, options, steps, batch_size=4, start_example=4 * start_step)
        parts = [stream(name, options, steps, batch_size=2, start_example=4 * start_step,
                        input_context=tf.distribute.InputContext(2, i, replicas))
                 for i, replicas in ((0, 2), (1, 1))]  # all-reduce, then PS-style context
        for x, *rest in zip(whole, *parts, strict=True):
            joined = np.stack([r.reshape(steps, 2, *r.shape[1:]) for r in rest], axis=1)
            assert np.array_equal(joined.reshape(x.shape), x)


def test_one_pass_without_repeat_and_two_replicas_per_pipeline(tmp_path):
    write_imagenet(tmp_path, {"train": [[1, 2, 3], [4, 5, 6, 7, 8]]})
    ids = stream("imagenet", {"data_dir": str(tmp_path), "image_size": 8, "repeat": False},
                 100, batch_size=1)[2]
    assert sorted(ids) == list(range(8))
    context = tf.distribute.InputContext(1, 0, 2)  # Mirrored: 2 replicas, one pipeline
    mirrored = stream("imagenet", {"data_dir": str(tmp_path), "image_size": 8}, 4,
                      batch_size=2, input_context=context, start_example=4)
    single = stream("imagenet", {"data_dir": str(tmp_path), "image_size": 8}, 2,
                    start_example=4)
    assert_same(mirrored, single)


def test_augmentation_follows_the_example_number(tmp_path):
    """The same image gets a new crop each epoch, the same crop on every replay."""
    rng = np.random.RandomState(0)
    write_records(tmp_path / "train-00000-of-00001",
                  [tf_example(image_bytes(rng.randint(0, 256, (40, 48, 3), np.uint8)), label)
                   for label in (1, 2, 3, 4)])  # noise: every crop and mirror differs
    options = {"data_dir": str(tmp_path), "image_size": 16}
    images, _, ids = stream("imagenet", options, 4)
    first, second = images[:4][np.argsort(ids[:4])], images[4:8][np.argsort(ids[4:8])]
    assert not np.array_equal(first, second)


def test_bad_start_or_ids_without_seed(tmp_path):
    write_imagenet(tmp_path, {"train": [[1, 2]]})
    context = tf.distribute.InputContext(2, 0, 2)
    with pytest.raises(UserError, match="start example 6 must be a whole number of global"):
        build_dataset("imagenet", "train", str(tmp_path), batch_size=2, seed=1,
                      input_context=context, start_example=6)
    with pytest.raises(UserError, match="global batch 6 does not split into 2 input pipelines"):
        build_dataset("imagenet", "train", str(tmp_path), batch_size=2, seed=1,
                      input_context=context, global_batch=6)
    with pytest.raises(UserError, match="with_ids.*need a seed"):
        build_dataset("imagenet", "train", str(tmp_path), batch_size=2, with_ids=True)


MIRRORED = """
import json, sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tfyard.data import build_dataset
data_dir = sys.argv[1]
def dataset(context=None, batch=8):
    return build_dataset("mnist", "train", data_dir, seed=3, with_ids=True, start_example=16,
                         batch_size=batch, input_context=context)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
replicas = iter(strategy.distribute_datasets_from_function(
    lambda ctx: dataset(ctx, ctx.get_per_replica_batch_size(8))))
single = iter(dataset())
same = []
for _ in range(4):
    local = strategy.experimental_local_results(next(replicas)[2])
    ids = np.concatenate([t.numpy() for t in local])
    same.append(ids.tolist() == next(single)[2].numpy().tolist())
print(json.dumps(same))
"""


def test_mirrored_replicas_concatenate_to_the_global_batch(tmp_path):
    """With a real MirroredStrategy over 2 CPU devices: replica 0 then replica 1 of each step
    are the global batch a single device reads at that step (resumed at step 2)."""
    import json
    import subprocess
    import sys

    images, labels = mnist_arrays(19, 0)
    np.savez(tmp_path / "mnist.npz", x_train=images, y_train=labels, x_test=images,
             y_test=labels)
    done = subprocess.run([sys.executable, "-c", MIRRORED, str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True] * 4


def test_every_seed_and_epoch_draws_a_real_shuffle():
    """A seed at the epoch of its own number kept most of 40 shards in place, and seeds or
    epochs 256 apart drew the same order (TensorFlow's index shuffle reads a key word's low
    8 bits on small sets, and permutes weakly when its first and third words match)."""
    from tfyard.data.order import permute

    def order(seed, epoch, size=40, salt=2):
        drawn = permute(tf.range(size), seed, salt, epoch, size).numpy()
        assert sorted(drawn) == list(range(size))
        return drawn

    for seed in range(8):
        for size in (40, 1797):
            drawn = order(seed, seed, size)
            assert abs(np.corrcoef(drawn, np.arange(size))[0, 1]) < 0.35, (seed, size)
            assert (drawn == np.arange(size)).sum() <= 4, (seed, size)
        assert not np.array_equal(order(seed, 0), order(seed + 256, 0))
        assert not np.array_equal(order(seed, 0), order(seed, 256))
        # a TFRecord window's order: (epoch << 32) + window, the epoch in its high bits
        assert not np.array_equal(order(seed, 5, salt=3), order(seed, (1 << 32) + 5, salt=3))
