"""The bounded cache of a bucket's data (`storage.stream`) on its own, against a real S3
server, without training: an object changed mid-run is one line, in the reader's thread and
through a tf.data pipeline alike; a set `data convert` wrote is counted from its index, no
shard fetched; shards tfyard did not write are walked by the first run alone, which leaves
their counts beside them (on s3:// and gs://); a seeded epoch of a set five times the limit
fetches each shard once, and a scan of the split streams within the limit too; in the
unseeded order a member fetches only its own files (slim TFRecord shards, an image folder's
images); two processes reading a set ten times the limit into one work dir share the limit,
on s3:// and on gs:// (the GCS emulator); a run that cannot stream (parameter servers) is
refused a set larger than the limit; a whole copy an earlier run made is removed once the
set streams."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.data.helpers import (
    coloured,
    image_bytes,
    tf_example,
    write_folder,
    write_imagenet,
    write_records,
)
from tests.storage.conftest import gcs_upload, upload
from tfyard.errors import UserError
from tfyard.storage import location, sharing, stream

FLAG = "--data_dir"
SIZE = 1000   # bytes a shard


def shards(folder, count: int):
    """`count` shards of SIZE bytes, each its own bytes."""
    folder.mkdir(parents=True)
    for number in range(count):
        (folder / f"train-{number:05d}-of-{count:05d}").write_bytes(bytes([number]) * SIZE)
    return folder


def cached(url: str, work, limit: int, refusal: str | None = None) -> str:
    """The folder the readers open for `url`, read through a cache of `limit` bytes."""
    return stream.readable(location(url, FLAG), str(work), stream.Streaming(
        limit, lambda name: name.startswith("train-"), refusal), FLAG)


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


def test_more_files_open_than_the_limit_holds_is_one_line(s3, tmp_path, monkeypatch):
    from tfyard.storage import cache

    monkeypatch.setattr(cache, "STUCK", 0.5)
    upload(s3, shards(tmp_path / "data", 4), "stuck", "set")
    root = cached("s3://stuck/set", tmp_path / "work", 2 * SIZE - 100)   # one file at a time
    first, second = (os.path.join(root, f"train-{n:05d}-of-00004") for n in range(2))
    with stream.held(first), pytest.raises(UserError) as caught:
        stream.opened(second)   # a reader holding one file waits for a second: no room
    assert str(caught.value) == ("--data_dir s3://stuck/set: the readers hold 1 kB of shards "
                                 "open and wait for 1 kB more, beyond --data_cache_limit "
                                 "1.9 kB; give --data_cache_limit 2kB or more")


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


class Objects:
    """The objects of one bucket, read and written through the scheme's own client."""

    def __init__(self, scheme: str, client, bucket: str):
        self.scheme, self.client, self.bucket = scheme, client, bucket

    def get(self, key: str) -> bytes:
        if self.scheme == "s3":
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return self.client.bucket(self.bucket).blob(key).download_as_bytes()

    def put(self, key: str, body: bytes) -> None:
        if self.scheme == "s3":
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body)
        else:
            self.client.bucket(self.bucket).blob(key).upload_from_string(body)

    def versions(self, prefix: str) -> dict[str, tuple[int, str]]:
        """name under `prefix`: (size, version: S3's ETag, GCS's generation)."""
        if self.scheme == "s3":
            found = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix)["Contents"]
            return {key["Key"][len(prefix):]: (key["Size"], key["ETag"]) for key in found}
        return {blob.name[len(prefix):]: (blob.size, str(blob.generation))
                for blob in self.client.list_blobs(self.bucket, prefix=prefix)}


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_shards_tfyard_did_not_write_are_walked_once_for_every_node(scheme, request, tmp_path,
                                                                     caplog):
    from tfyard.data.formats.framing import INDEX_FILE, record_counts
    from tfyard.data.formats.tfrecord import shards as shards_of

    client = request.getfixturevalue({"s3": "s3", "gs": "gcs"}[scheme])
    objects = Objects(scheme, client, "foreign")

    def counted(work) -> tuple[list[int], int]:
        root = cached(f"{scheme}://foreign/set", work, 4000)
        counts = record_counts(shards_of("imagenet", root, "train"), str(work))
        return counts, stream.figures(str(work))[0]["fetched"]

    def index() -> dict:
        return json.loads(objects.get(f"set/{INDEX_FILE}"))

    def shards() -> int:
        return sum(path.stat().st_size for path in data.glob("train-*"))

    data = tmp_path / "data"
    data.mkdir()
    for number, count in enumerate((3, 1, 2, 4, 2, 3)):
        write_records(data / f"train-{number:05d}-of-00006", [b"r" * 300] * count)
    (upload if scheme == "s3" else gcs_upload)(client, data, "foreign", "set")
    assert counted(tmp_path / "first") == ([3, 1, 2, 4, 2, 3], shards())   # each fetched once
    assert sorted(objects.versions("set/"))[0] == INDEX_FILE   # then the shards
    assert index() == {name: [size, version, count] for (name, (size, version)), count in zip(
        sorted(objects.versions("set/").items())[1:], (3, 1, 2, 4, 2, 3), strict=True)}

    # another node (a new work dir, an empty cache) fetches none of them to count them
    assert counted(tmp_path / "second") == ([3, 1, 2, 4, 2, 3], 0)

    # a shard rewritten in the bucket is not that version: walked again, its entry replaced
    rewritten = data / "train-00001-of-00006"
    write_records(rewritten, [b"r" * 300] * 5)
    objects.put("set/train-00001-of-00006", rewritten.read_bytes())
    assert counted(tmp_path / "third") == ([3, 5, 2, 4, 2, 3], rewritten.stat().st_size)
    assert index()["train-00001-of-00006"][2] == 5 and len(index()) == 6

    # an index tfyard cannot read is left as it is; the counts stay in the work dir
    objects.put(f"set/{INDEX_FILE}", b"someone else's")
    with caplog.at_level("INFO", logger="tfyard"):
        assert counted(tmp_path / "fourth")[1] == shards()
    assert objects.get(f"set/{INDEX_FILE}") == b"someone else's"
    assert "not an index of record counts tfyard wrote" in caplog.text


def test_a_seeded_epoch_fetches_each_shard_once(s3, tmp_path):
    from tfyard.data import build_dataset
    from tfyard.data.formats.framing import INDEX_FILE, write_index
    from tfyard.data.inspect import problems

    data = tmp_path / "data"
    write_imagenet(data, {"train": [[1, 2]] * 20})
    write_index(str(data), {path.name: 2 for path in data.iterdir()})
    upload(s3, data, "epoch", "set")
    sizes = {path.name: path.stat().st_size for path in data.iterdir()}
    shards = sum(size for name, size in sizes.items() if name != INDEX_FILE)
    work = tmp_path / "work"
    root = cached("s3://epoch/set", work, sum(sizes.values()) // 5)
    batches = build_dataset("imagenet", "train", root, batch_size=4, image_size=16, seed=7,
                            repeat=False, cache_dir=str(work))
    assert sum(int(labels.shape[0]) for _, labels in batches) == 40
    # every shard was read from an empty cache, so each was fetched once: no second pass
    assert stream.figures(str(work))[0]["fetched"] == shards
    # a scan of the split (the decode-error check, --skip_corrupt's count) streams too
    assert not list(problems("imagenet", root, "train", cache_dir=str(work)))
    cache = stream.figures(str(work))[0]
    assert cache["fetched"] > shards and cache["high_water"] <= cache["limit"], cache


def test_unseeded_members_fetch_only_their_own_files(s3, tmp_path):
    import tensorflow as tf

    from tfyard.data import build_dataset, dataset_info, local_data
    from tfyard.data.formats.folder import listing
    from tfyard.data.formats.framing import write_index
    from tfyard.data.formats.tfrecord import shards as shards_of

    # slim-style TFRecords (`tfrecord`: *train*.tfrecord and labels.txt), indexed
    records, photos = tmp_path / "records", tmp_path / "photos"
    records.mkdir()
    for number in range(8):
        write_records(records / f"set_train_{number}.tfrecord",
                      [tf_example(image_bytes(coloured(label)), label) for label in (0, 1)])
    write_records(records / "set_validation_0.tfrecord",
                  [tf_example(image_bytes(coloured(0)), 0)])
    write_index(str(records), {path.name: 1 if "validation" in path.name else 2
                               for path in records.iterdir()})
    (records / "labels.txt").write_text("0:a\n1:b\n")
    write_folder(photos, {"cat": 10, "dog": 10})
    upload(s3, records, "unseeded", "records")
    upload(s3, photos, "unseeded", "photos")
    second = tf.distribute.InputContext(2, 1, 2)   # the second of two members
    for name, prefix in (("tfrecord", "records"), ("imagefolder", "photos")):
        work, total = tmp_path / name, sum(path.stat().st_size
                                           for path in (tmp_path / prefix).rglob("*"))
        root = local_data(name, f"s3://unseeded/{prefix}", str(work), total // 3)
        assert root.startswith(str(work / "bucket-stream"))
        dataset_info(name, root, cache_dir=str(work))   # an index: counts fetch nothing
        batches = build_dataset(name, "train", root, batch_size=2, image_size=16,
                                input_context=second, repeat=False, cache_dir=str(work))
        assert sum(int(labels.shape[0]) for _, labels in batches) == 8
        files = (shards_of(name, root, "train")[1::2] if name == "tfrecord"   # by file
                 else [path for path, _ in listing(root, "train")[1]][1::2])   # by image
        # the whole epoch fetched this member's files only, each once
        assert stream.figures(str(work))[0]["fetched"] == sum(
            stream.identity(path)[1][0] for path in files)


# A second member on the node: reads every shard of URL (argv 3) through the cache of
# WORK (argv 1) at LIMIT (argv 2), sampling the disk both members' files take meanwhile.
MEMBER = """
import json, os, sys, threading, time
from tfyard.storage import location, sharing, stream

work, limit, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
root = stream.readable(location(url, "--data_dir"), work,
                       stream.Streaming(limit, lambda name: name.startswith("train-")),
                       "--data_dir")
share, peak, done = stream._caches[root].share(), [0], threading.Event()

def sample():
    while not done.is_set():
        peak[0] = max(peak[0], sharing.disk_used(os.path.join(work, "bucket-stream")))
        time.sleep(0.005)

threading.Thread(target=sample, daemon=True).start()
paths = sorted(stream.listed(root))
stream.announce(paths)
for path in paths:
    with stream.held(path):
        time.sleep(0.01)
done.set()
print(json.dumps({"root": root, "share": share, "peak": peak[0]}))
"""


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_two_members_on_one_node_share_the_limit(scheme, request, tmp_path):
    import tfyard

    client = request.getfixturevalue({"s3": "s3", "gs": "gcs"}[scheme])
    (upload if scheme == "s3" else gcs_upload)(client, shards(tmp_path / "data", 40),
                                               "shared", "set")
    url, work, limit = f"{scheme}://shared/set", tmp_path / "work", 4 * SIZE   # a tenth
    root = cached(url, work, limit)
    paths = sorted(stream.listed(root))
    stream.announce(paths)
    for path in paths[:4]:   # this member has filled its cache, and waits
        with stream.held(path):
            pass
    cache = stream._caches[root]
    assert cache.share() == limit and cache.high_water <= limit

    member = subprocess.run(
        [sys.executable, "-c", MEMBER, str(work), str(limit), url], capture_output=True,
        text=True, timeout=120, check=True,
        env={**os.environ, "PYTHONPATH": str(Path(tfyard.__file__).parents[1])})
    other = json.loads(member.stdout)
    assert other["root"] == f"{root}.1" and other["share"] == limit // 2
    assert other["peak"] <= limit, other   # the files read included
    time.sleep(sharing.TRIM)   # members are counted at most every TRIM seconds
    assert cache.share() == limit   # the other member has left: the whole limit again


def test_a_run_that_cannot_stream_is_refused_a_set_larger_than_the_limit(s3, tmp_path):
    upload(s3, shards(tmp_path / "data", 4), "remote", "set")
    assert cached("s3://remote/set", tmp_path / "whole", 4 * SIZE, "never") == str(
        tmp_path / "whole" / "bucket-data" / "s3" / "remote" / "set")   # it fits: copied
    with pytest.raises(UserError, match="^--data_dir s3://remote/set holds 4 kB, more than "
                       "the 2 kB data cache: ps runs cannot; fix, or give --data_cache_limit "
                       "4 kB or more for a whole copy$"):
        cached("s3://remote/set", tmp_path / "ps", 2 * SIZE, "ps runs cannot; fix")
    assert not (tmp_path / "ps").exists()
    # read in pieces once the limit is below the set: the whole copy is removed, not kept
    assert cached("s3://remote/set", tmp_path / "whole", 2 * SIZE).startswith(
        str(tmp_path / "whole" / "bucket-stream"))
    assert not (tmp_path / "whole" / "bucket-data" / "s3" / "remote" / "set").exists()
