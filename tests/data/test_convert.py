"""Converters write ImageNet-style shards that read back exactly; the CLI drives them."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.data.helpers import collect, mnist_arrays, write_cifar, write_folder
from tfyard.cli import main
from tfyard.data import build_dataset, dataset_info
from tfyard.data.convert import convert_cifar10, convert_imagefolder


def tree(root) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(root) for f in files}


def read_labels(dst, split):
    return collect(build_dataset("imagenet", split, str(dst), batch_size=1, image_size=8,
                                 repeat=False, shuffle=False))[1]


@pytest.mark.cluster  # spawns writer processes
def test_imagefolder_deterministic_across_worker_counts(tmp_path):
    src = tmp_path / "src"
    write_folder(src, {"ant": 4, "bee": 8})
    write_folder(src, {"cat": 4}, fmt="PNG")  # PNG is re-encoded as JPEG
    one = convert_imagefolder(str(src), str(tmp_path / "one"), shards=2,
                              validation_fraction=0.25, workers=1)
    two = convert_imagefolder(str(src), str(tmp_path / "two"), shards=2,
                              validation_fraction=0.25, workers=2)
    assert one == two == {"train": 12, "validation": 4}
    assert tree(tmp_path / "one") == tree(tmp_path / "two")


def test_imagefolder_round_trip_and_inspect(tmp_path, capsys):
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_folder(src, {"ant": 4, "bee": 8, "cat": 4})
    assert main(["data", "convert", "imagefolder", str(src), str(dst), "--shards", "3",
                 "--validation_fraction", "0.25", "--workers", "1"]) == 0
    assert sorted(os.listdir(dst)) == ["labels.txt", "train-00000-of-00003",
                                       "train-00001-of-00003", "train-00002-of-00003",
                                       "validation-00000-of-00001"]
    assert (dst / "labels.txt").read_text() == "1:ant\n2:bee\n3:cat\n"
    info = dataset_info("imagenet", str(dst))
    assert info.num_classes == 3 and info.num_examples == {"train": 12, "validation": 4}
    assert np.bincount(read_labels(dst, "validation")).tolist() == [1, 2, 1]
    assert np.bincount(read_labels(dst, "train")).tolist() == [3, 6, 3]
    capsys.readouterr()
    assert main(["data", "inspect", str(dst), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "format:  imagenet" in out
    assert "train: 12 records, 3 classes, sizes [40, 48]..[40, 48], 0 problems" in out


def test_hostile_names_never_escape_dst(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "out" / "dst"
    write_folder(src, {"a..b": 1, "back\\slash": 1, "new\nline": 1})
    weird = os.path.join(os.fsencode(src), b"\xff\xfe-bytes")
    os.makedirs(weird)
    os.link(os.path.join(src, "a..b", "0.jpg"), os.path.join(weird, b"x..\xff.jpg"))
    before = set(tree(tmp_path))
    convert_imagefolder(str(src), str(dst), shards=1, workers=1)
    written = set(tree(tmp_path)) - before
    assert all(p.startswith(os.path.join("out", "dst") + os.sep) for p in written)
    assert not any(p.endswith(".tmp") for p in written)
    lines = (dst / "labels.txt").read_text().splitlines()
    assert lines == ["1:a..b", "2:back\\slash", "3:new line", "4:\ufffd\ufffd-bytes"]
    assert sorted(read_labels(dst, "train").tolist()) == [0, 1, 2, 3]


def test_cifar10_and_mnist_converters(tmp_path, capsys):
    files = {f"data_batch_{i}.bin": [i, 9 - i] for i in range(1, 6)}
    write_cifar(tmp_path / "cifar", "cifar10", {**files, "test_batch.bin": [4, 2, 0]})
    assert convert_cifar10(str(tmp_path / "cifar"), str(tmp_path / "c"), shards=2,
                           workers=1) == {"train": 10, "validation": 3}
    assert sorted(read_labels(tmp_path / "c", "validation").tolist()) == [0, 2, 4]
    (x_train, y_train), (x_test, y_test) = mnist_arrays(8, 0), mnist_arrays(3, 1)
    (tmp_path / "mnist").mkdir()
    np.savez(tmp_path / "mnist" / "mnist.npz", x_train=x_train, y_train=y_train,
             x_test=x_test, y_test=y_test)
    assert main(["data", "convert", "mnist", str(tmp_path / "mnist"), str(tmp_path / "m"),
                 "--shards", "1", "--workers", "1"]) == 0
    assert sorted(read_labels(tmp_path / "m", "validation").tolist()) == sorted(y_test)
    assert dataset_info("imagenet", str(tmp_path / "m")).num_classes == 10


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["data", "inspect", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip().endswith("pass the folder that holds the data")
    assert main(["data", "convert", "imagefolder", str(tmp_path / "nope"),
                 str(tmp_path / "o"), "--workers", "1"]) == 2
    assert "image folder" in capsys.readouterr().err


def test_convert_prints_no_tensorflow_lines_and_a_failure_leaves_no_shards(tmp_path):
    from tests.conftest import run_tfyard
    from tfyard.quiet import ABSL_BANNER

    src, dst = tmp_path / "src", tmp_path / "dst"
    write_folder(src, {"ant": 4, "bee": 4})
    (src / "bee" / "9.jpg").write_bytes(b"not an image")
    failed = run_tfyard("data", "convert", "imagefolder", src, dst, "--shards", "4",
                        "--workers", "2")
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed.stderr
    assert "9.jpg: not a readable image" in failed.stderr
    assert sorted(os.listdir(dst)) == []                 # no shard, no .tmp
    (src / "bee" / "9.jpg").unlink()
    done = run_tfyard("data", "convert", "folder", src, dst, "--shards", "4", "--workers", "2")
    assert done.returncode == 0, done.stderr
    assert ABSL_BANNER not in done.stderr and "cuda" not in done.stderr, done.stderr
    assert "train: 8 records" in done.stdout
