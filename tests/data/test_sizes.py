"""Sizes come from the records present, counted from the TFRecord framing and cached."""

from __future__ import annotations

import json
import logging
import os

import pytest

from tests.data.helpers import image_bytes, tf_example, write_records
from tfyard.data import dataset_info
from tfyard.data.formats.framing import CACHE_FILE
from tfyard.data.inspect import inspect


def write_shards(root, split: str, total: int, present: dict[int, int]) -> None:
    """Shards `present` {number: records} of a set whose names say `total` shards."""
    for number, records in present.items():
        write_records(root / f"{split}-{number:05d}-of-{total:05d}",
                      [tf_example(image_bytes(pixels=_pixels()), 1)] * records)


def _pixels():
    import numpy as np

    return np.full((8, 8, 3), 90, np.uint8)


def test_partial_imagenet_is_counted_and_warned_once(tmp_path, caplog):
    write_shards(tmp_path, "train", 1024, {0: 3, 7: 2})
    write_shards(tmp_path, "validation", 128, {0: 4})
    work = tmp_path / "work"
    with caplog.at_level(logging.WARNING, logger="tfyard"):
        info = dataset_info("imagenet", str(tmp_path), cache_dir=str(work))
    assert info.num_examples == {"train": 5, "validation": 4}
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "tfyard: imagenet train: 2 of 1024 shards present hold 5 records, not the 1,281,167 "
        "their names imply; using 5",
        "tfyard: imagenet validation: 1 of 128 shards present hold 4 records, not the 50,000 "
        "their names imply; using 4"]
    cache = json.loads((work / CACHE_FILE).read_text())
    shard = str(tmp_path / "train-00000-of-01024")
    assert cache[shard][2] == 3


def test_cached_counts_are_used_until_the_file_changes(tmp_path):
    write_shards(tmp_path, "train", 4, {0: 3, 1: 2, 2: 1, 3: 2})
    write_shards(tmp_path, "validation", 1, {0: 1})
    work = tmp_path / "work"
    assert dataset_info("imagenet", str(tmp_path), cache_dir=str(work)).num_examples["train"] == 8
    cache_file = work / CACHE_FILE
    cache = json.loads(cache_file.read_text())
    shard = str(tmp_path / "train-00000-of-00004")
    cache[shard][2] = 1000  # same size and time: the cached number is believed
    cache_file.write_text(json.dumps(cache))
    assert dataset_info("imagenet", str(tmp_path), cache_dir=str(work)).num_examples["train"] \
        == 1005
    os.utime(shard, ns=(1, 1))  # a changed file is counted again
    assert dataset_info("imagenet", str(tmp_path), cache_dir=str(work)).num_examples["train"] == 8


def test_missing_shards_of_a_named_set_warn(tmp_path, caplog):
    write_shards(tmp_path, "train", 4, {0: 2, 2: 2})
    write_shards(tmp_path, "validation", 1, {0: 1})
    with caplog.at_level(logging.WARNING, logger="tfyard"):
        assert dataset_info("imagenet", str(tmp_path)).num_examples["train"] == 4
    assert [r.getMessage() for r in caplog.records] == [
        "tfyard: imagenet train: 2 of 4 shards present (names end -of-00004); using the 4 "
        "records they hold"]


@pytest.mark.parametrize("damage", ["checksum", "header"])
def test_verify_names_file_record_and_reason_in_plain_words(tmp_path, damage):
    shard = tmp_path / "x_validation.tfrecord"
    write_records(shard, [tf_example(image_bytes(_pixels()), 0)] * 3)
    (tmp_path / "labels.txt").write_text("0:a\n")
    data = bytearray(shard.read_bytes())
    length = len(data) // 3
    if damage == "checksum":
        data[length + 30] ^= 0xFF  # a byte inside record 1's data
    else:
        data = data[:2 * length + 5]  # record 2 stops inside its header
    shard.write_bytes(bytes(data))
    problems = inspect(str(tmp_path), verify=True)["problems"]
    reason = ("corrupted: the record fails its checksum" if damage == "checksum"
              else f"truncated: the file ends at byte {2 * length + 5}, inside the 12-byte")
    assert len(problems) == 1
    assert problems[0].startswith(f"{shard}: record {1 if damage == 'checksum' else 2}: {reason}")
    assert "{{" not in problems[0] and "__wrapped__" not in problems[0]


def test_verify_cli_prints_the_plain_reason(tmp_path):
    """`tfyard data inspect --verify`, as a user runs it, on a record with a flipped byte."""
    import subprocess
    import sys

    shard = tmp_path / "validation-00000-of-00001"
    write_records(shard, [tf_example(image_bytes(_pixels()), 1)] * 2)
    write_records(tmp_path / "train-00000-of-00001", [tf_example(image_bytes(_pixels()), 1)])
    data = bytearray(shard.read_bytes())
    data[len(data) // 2 + 30] ^= 0xFF
    shard.write_bytes(bytes(data))
    done = subprocess.run([sys.executable, "-m", "tfyard", "data", "inspect", "--verify",
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert (f"  {shard}: record 1: corrupted: the record fails its checksum (its bytes "
            "changed after it was written)\n") in done.stdout
    assert "function_node" not in done.stdout + done.stderr
