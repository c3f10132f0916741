"""The bounded cache of a bucket's data (`storage.stream`) on its own, against a real S3
server, without training: an object changed mid-run is one line, in the reader's thread and
through a tf.data pipeline alike; a set `data convert` wrote is counted from its index, no
shard fetched."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.data.helpers import write_records
from tests.storage.conftest import upload
from tfyard.errors import UserError
from tfyard.storage import location, stream

FLAG = "--data_dir"
SIZE = 1000   # bytes a shard


def shards(folder, count: int):
    """`count` shards of SIZE bytes, each its own bytes."""
    folder.mkdir(parents=True)
    for number in range(count):
        (folder / f"train-{number:05d}-of-{count:05d}").write_bytes(bytes([number]) * SIZE)
    return folder


def cached(url: str, work, limit: int) -> str:
    """The folder the readers open for `url`, read through a cache of `limit` bytes."""
    return stream.readable(location(url, FLAG), str(work),
                           stream.Streaming(limit, lambda name: name.startswith("train-")), FLAG)


def test_an_object_changed_mid_run_is_one_line(s3, tmp_path):
    import tensorflow as tf

    from tfyard.data import checked
    from tfyard.data.fetched import reading

    upload(s3, shards(tmp_path / "data", 4), "changing", "set")
    root = cached("s3://changing/set", tmp_path / "work", 2 * SIZE)
    first, second, third = (os.path.join(root, f"train-{n:05d}-of-00004") for n in range(3))
    with stream.held(first) as path, open(path, "rb") as read:
        assert read.read() == bytes([0]) * SIZE
    s3.put_object(Bucket="changing", Key="set/train-00001-of-00004", Body=b"new" * SIZE)
    with pytest.raises(UserError) as caught:
        stream.opened(second)
    line = str(caught.value)
    assert line.startswith("--data_dir s3://changing/set/train-00001-of-00004: the data "
                           "changed during the run") and "rerun" in line and "\n" not in line

    # inside tf.data the reader's error reaches the loop as TensorFlow's: named by its line
    open_file, _ = reading([third], tf.data.TFRecordDataset)
    records = tf.data.Dataset.from_tensor_slices([third]).interleave(open_file)
    with pytest.raises(UserError) as caught, checked("imagenet"):
        list(records)
    assert str(caught.value) == line


def test_a_converted_set_is_counted_from_its_index(s3, tmp_path):
    from tfyard.data.convert import convert_arrays
    from tfyard.data.formats.framing import CACHE_FILE, INDEX_FILE, record_counts
    from tfyard.data.formats.tfrecord import shards as shards_of

    data = tmp_path / "data"
    pixels = np.arange(10 * 4 * 4 * 3, dtype=np.uint8).reshape(10, 4, 4, 3)
    convert_arrays(str(data), {"train": (pixels[:8], np.zeros(8)),
                               "validation": (pixels[8:], np.zeros(2))}, ["a"], 4, workers=1)
    upload(s3, data, "converted", "set")
    sizes = [path.stat().st_size for path in data.iterdir()]
    work = tmp_path / "work"
    root = cached("s3://converted/set", work, 3 * max(sizes) + sum(sorted(sizes)[:2]))
    assert record_counts(shards_of("imagenet", root, "train"), str(work)) == [2, 2, 2, 2]
    assert stream.figures(str(work))[0]["fetched"] == 0 and not (work / CACHE_FILE).exists()

    # a shard the index does not name at its size is walked
    local = shards_of("imagenet", str(data), "train")
    write_records(local[0], [b"x"] * 3)
    assert record_counts(local) == [3, 2, 2, 2] and (data / INDEX_FILE).exists()
