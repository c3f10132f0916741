"""Each bad input gives one UserError naming the file (and record) and the fix."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from tests.data.helpers import (
    collect,
    coloured,
    image_bytes,
    tf_example,
    write_cifar,
    write_idx,
    write_imagenet,
    write_records,
)
from tfyard.data import build_dataset, checked, dataset_info
from tfyard.data.inspect import inspect
from tfyard.errors import UserError


def read_all(name, data_dir, **options):
    with checked(name, data_dir, split="validation"):
        return collect(build_dataset(name, "validation", data_dir, batch_size=2, **options))


def test_unknown_name_lists_close_matches_first():
    with pytest.raises(UserError, match=r"unknown dataset 'imagnet'; use one of: imagenet, "):
        build_dataset("imagnet", "train", "/tmp", batch_size=1)


def test_missing_or_absent_data_dir(tmp_path):
    with pytest.raises(UserError, match="needs --data_dir"):
        dataset_info("imagenet")
    with pytest.raises(UserError, match="does not exist; check --data_dir"):
        build_dataset("cifar10", "train", str(tmp_path / "nope"), batch_size=1)


def test_no_matching_shards_and_bad_split(tmp_path):
    (tmp_path / "train-00000-of-00001.tmp").write_bytes(b"half written")
    with pytest.raises(UserError, match=r"no train shards for imagenet in .*train-\?\?\?\?\?"):
        build_dataset("imagenet", "train", str(tmp_path), batch_size=1)
    with pytest.raises(UserError, match="unknown split 'dev'"):
        build_dataset("imagenet", "dev", str(tmp_path), batch_size=1)


def test_truncated_tfrecord_named_with_record(tmp_path):
    write_imagenet(tmp_path, {"train": [[1]], "validation": [[1, 2, 3]]})
    shard = tmp_path / "validation-00000-of-00001"
    shard.write_bytes(shard.read_bytes()[:-40])
    plain = (f"{shard}: record 2: truncated: the record at byte \\d+ declares \\d+ bytes of "
             "data but the file ends 40 bytes short")
    with pytest.raises(UserError, match=f"{plain}; .*--skip_corrupt"):
        dataset_info("imagenet", str(tmp_path))
    with pytest.raises(UserError, match=f"{plain}; .*--skip_corrupt"):
        read_all("imagenet", str(tmp_path))
    report = inspect(str(tmp_path), verify=True)
    assert report["splits"]["validation"]["problems"] == 1
    assert report["splits"]["validation"]["records"] == 3  # 2 good + the truncated one
    assert re.fullmatch(plain, report["problems"][0])  # no TensorFlow op text


def test_undecodable_image_named_and_skipped(tmp_path):
    write_imagenet(tmp_path, {"train": [[1]]})
    shard = tmp_path / "validation-00000-of-00001"
    good = [tf_example(image_bytes(coloured(lab)), lab) for lab in (1, 2, 3)]
    write_records(shard, good[:2] + [tf_example(b"\xff\xd8\xff garbage", 4)] + good[2:])
    with pytest.raises(UserError, match=f"{shard}: record 2: cannot decode.*--skip_corrupt") \
            as error:
        read_all("imagenet", str(tmp_path), image_size=8)
    assert "{{" not in str(error.value) and "[Op:" not in str(error.value)
    _, labels = read_all("imagenet", str(tmp_path), image_size=8, skip_corrupt=True)
    assert labels.tolist() == [0, 1, 2]
    assert inspect(str(tmp_path), verify=True)["splits"]["validation"]["problems"] == 1


def test_label_out_of_range_for_class_count(tmp_path):
    shard = tmp_path / "x_validation_00000-of-00001.tfrecord"
    write_records(shard, [tf_example(image_bytes(coloured(lab), "PNG"), lab) for lab in (0, 7, 1)])
    (tmp_path / "labels.txt").write_text("0:a\n1:b\n2:c\n")
    with pytest.raises(UserError, match=f"{shard}: record 1: label 7 is outside 0..2"):
        read_all("tfrecord", str(tmp_path), image_size=8)
    _, labels = read_all("tfrecord", str(tmp_path), image_size=8, skip_corrupt=True)
    assert labels.tolist() == [0, 1]


def test_cifar_truncated_file_and_bad_label(tmp_path):
    write_cifar(tmp_path, "cifar10", {"test_batch.bin": [1, 12, 3]})
    with pytest.raises(UserError, match=r"test_batch.bin: record 1: label 12 is outside 0..9"):
        read_all("cifar10", str(tmp_path))
    batch = tmp_path / "test_batch.bin"
    batch.write_bytes(batch.read_bytes()[:-5])
    with pytest.raises(UserError, match=f"{batch}: 9214 bytes is not a whole number of 3073"):
        read_all("cifar10", str(tmp_path))


def test_mnist_truncated_idx_and_missing_files(tmp_path):
    with pytest.raises(UserError, match="no mnist.npz and no train-images-idx3-ubyte.gz"):
        dataset_info("mnist", str(tmp_path))
    for prefix in ("train", "t10k"):
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", np.zeros((4, 28, 28)))
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", np.arange(4))
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    write_idx(path, np.zeros((4, 28, 28)))
    import gzip

    data = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(data[:-100]))
    with pytest.raises(UserError, match=f"{path}: holds .*truncated"):
        read_all("mnist", str(tmp_path))


def test_folder_undecodable_image(tmp_path):
    for name in ("a", "b"):
        os.makedirs(tmp_path / "validation" / name)
        (tmp_path / "validation" / name / "ok.png").write_bytes(
            image_bytes(coloured(1), "PNG"))
    for name in ("a", "b"):
        os.makedirs(tmp_path / "train" / name)
        (tmp_path / "train" / name / "x.jpg").write_bytes(image_bytes(coloured(1)))
    bad = tmp_path / "validation" / "b" / "zz.jpg"
    bad.write_bytes(b"not an image")
    with pytest.raises(UserError, match=f"{bad}: cannot decode.*--skip_corrupt"):
        read_all("folder", str(tmp_path), image_size=8)
    _, labels = read_all("folder", str(tmp_path), image_size=8, skip_corrupt=True)
    assert labels.tolist() == [0, 1]


@pytest.mark.parametrize("decode", [False, True])
def test_fast_scan_finds_what_the_record_by_record_scan_finds(tmp_path, decode):
    """The parallel pass must report the same labels and sizes, and hand any file with a
    bad record to the slow scan, which names it."""
    from tfyard.data.formats.tfrecord import _slow_scan, scan_files

    mixed = tmp_path / "mixed.tfrecord"
    write_records(mixed, [tf_example(image_bytes(coloured(lab, 20 + lab, 30), fmt), lab)
                          for lab, fmt in ((0, "JPEG"), (5, "PNG"), (1, "JPEG"))])
    broken = tmp_path / "broken.tfrecord"
    write_records(broken, [tf_example(image_bytes(coloured(1)), 1),
                           tf_example(b"\xff\xd8\xff garbage", 2)])
    files = [str(mixed), str(broken)]
    fast = list(scan_files(files, 3, 0, decode))
    assert fast == [r for f in files for r in _slow_scan(f, 3, 0, decode)]
    assert [(r.label, r.size) for r in fast[:3]] == [(0, (20, 30)), (5, (25, 30)), (1, (21, 30))]
    assert "outside 0..2" in fast[1].problem
    assert (fast[4].index, "cannot decode" in fast[4].problem) == (1, True)
