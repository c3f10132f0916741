"""Converters write ImageNet-style shards that read back exactly; the CLI drives them."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from tests.data.helpers import collect, mnist_arrays, write_cifar, write_folder
from tfyard.cli import main
from tfyard.data import build_dataset, dataset_info
from tfyard.data.convert import convert_cifar10, convert_imagefolder
from tfyard.data.formats.framing import INDEX_FILE


def tree(root) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(root) for f in files}


def read_labels(dst, split):
    return collect(build_dataset("imagenet", split, str(dst), batch_size=1, image_size=8,
                                 repeat=False, shuffle=False))[1]


@pytest.mark.cluster  # spawns writer processes
def test_imagefolder_deterministic_across_worker_counts_and_no_tensorflow_lines(tmp_path):
    """One writer here, two behind the console script: the same bytes, and the script (its
    writers' stderr filtered) prints its start and end lines and none of TensorFlow's."""
    from tests.conftest import run_tfyard
    from tfyard.quiet.log_filter import ABSL_BANNER

    src = tmp_path / "src"
    write_folder(src, {"ant": 4, "bee": 8})
    write_folder(src, {"cat": 4}, fmt="PNG")  # PNG is re-encoded as JPEG
    one = convert_imagefolder(str(src), str(tmp_path / "one"), shards=2,
                              validation_fraction=0.25, workers=1)
    assert one == {"train": 12, "validation": 4}
    two = run_tfyard("data", "convert", "imagefolder", src, tmp_path / "two", "--shards", "2",
                     "--validation_fraction", "0.25", "--workers", "2")
    assert two.returncode == 0, two.stderr
    assert ABSL_BANNER not in two.stderr and "cuda" not in two.stderr, two.stderr
    assert "train: 12 records, validation: 4 records" in two.stdout
    # Into a pipe: a line at the start and one at the end, none a shard (2 train, 1 validation).
    started, ended = two.stderr.splitlines()
    assert started == "writing 3 shards" and re.fullmatch(r"wrote 3 shards in 0:00:\d\d", ended)
    assert tree(tmp_path / "one") == tree(tmp_path / "two")


def test_imagefolder_round_trip_and_inspect(tmp_path, capsys):
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_folder(src, {"ant": 4, "bee": 8, "cat": 4})
    assert main(["data", "convert", "imagefolder", str(src), str(dst), "--shards", "3",
                 "--validation_fraction", "0.25", "--workers", "1"]) == 0
    assert sorted(os.listdir(dst)) == ["labels.txt", INDEX_FILE, "train-00000-of-00003",
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
    write_folder(src, {"a..b": 2, "back\\slash": 2, "new\nline": 2})   # one held out each
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


def test_convert_prints_no_tensorflow_lines_and_a_failure_leaves_no_shards(tmp_path, capsys):
    """A failure of two writers behind the console script: one line, none of TensorFlow's,
    and no shard. (A success's lines: the test above; its rerun here is in this process.)"""
    from tests.conftest import run_here, run_tfyard

    src, dst = tmp_path / "src", tmp_path / "dst"
    write_folder(src, {"ant": 4, "bee": 4})
    (src / "bee" / "9.jpg").write_bytes(b"not an image")
    failed = run_tfyard("data", "convert", "imagefolder", src, dst, "--shards", "4",
                        "--workers", "2")
    started, error = failed.stderr.splitlines()   # the start line, then the one-line error
    assert failed.returncode == 2 and started == "writing 5 shards", failed.stderr
    assert "9.jpg: not a readable image" in error
    assert os.listdir(tmp_path) == ["src"]     # no shard, no staging
    (src / "bee" / "9.jpg").unlink()
    done = run_here(capsys, "data", "convert", "folder", src, dst, "--shards", "4",
                    "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert "train: 6 records, validation: 2 records" in done.stdout   # 10 % held out


def shard_names(dst) -> list[str]:
    return sorted(os.listdir(dst))


def test_converting_twice_never_leaves_a_shard_of_the_first_set(tmp_path, capsys):
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_folder(src, {"ant": 4, "bee": 4})
    convert = ["data", "convert", "imagefolder", str(src), str(dst), "--workers", "1"]
    assert main([*convert, "--shards", "3"]) == 0
    first = tree(dst)
    capsys.readouterr()
    assert main([*convert, "--shards", "2"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"tfyard: error: destination {dst} already holds a converted set (labels.txt, ...); "
        "pass --overwrite to replace it whole, or give a new directory"]
    (src / "bee" / "9.jpg").write_bytes(b"not an image")   # a failed overwrite keeps the set
    assert main([*convert, "--shards", "2", "--overwrite"]) == 2
    assert tree(dst) == first and shard_names(tmp_path) == ["dst", "src"]
    (src / "bee" / "9.jpg").unlink()
    assert main([*convert, "--shards", "2", "--overwrite"]) == 0
    assert shard_names(dst) == ["labels.txt", INDEX_FILE, "train-00000-of-00002",
                                "train-00001-of-00002", "validation-00000-of-00001"]
    assert shard_names(tmp_path) == ["dst", "src"]   # nothing staged is left beside it
    assert dataset_info("imagenet", str(dst)).num_examples == {"train": 6, "validation": 2}


@pytest.mark.parametrize("where, message", [
    ("src", "destination {src} is the source; write the shards to a directory outside it"),
    ("src/ant/out", "destination {src}/ant/out is inside the source {src}; write the shards "
                    "to a directory outside it"),
    ("file", "destination {tmp}/file is a file; give a directory for the shards"),
    ("file/sub", "cannot write the destination {tmp}/file/sub: {tmp}/file is a file, not a "
                 "directory"),
    ("other", "destination {tmp}/other holds other files than a converted set (notes.txt); "
              "give a new or empty directory"),
])
def test_a_destination_that_would_mix_or_lose_files_is_one_line(tmp_path, capsys, where,
                                                                 message):
    src = tmp_path / "src"
    write_folder(src, {"ant": 2, "bee": 2})
    (tmp_path / "file").write_text("x")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    before = tree(tmp_path)
    assert main(["data", "convert", "imagefolder", str(src), str(tmp_path / where),
                 "--overwrite"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "tfyard: error: " + message.format(src=src, tmp=tmp_path)]
    assert tree(tmp_path) == before


def test_the_default_convert_holds_out_what_training_holds_out(tmp_path):
    import tensorflow as tf

    from tfyard.data.formats.folder import listing

    src, dst = tmp_path / "src", tmp_path / "dst"
    write_folder(src, {"ant": 12, "bee": 9})
    convert_imagefolder(str(src), str(dst), shards=2, workers=1)

    def named(records):
        return sorted((ex.features.feature["image/class/label"].int64_list.value[0] - 1,
                       ex.features.feature["image/filename"].bytes_list.value[0].decode())
                      for ex in map(tf.train.Example.FromString, records))

    shards = sorted(str(p) for p in dst.glob("validation-*"))
    held = named(r.numpy() for r in tf.data.TFRecordDataset(shards))
    assert held == sorted((label, os.path.basename(path))
                          for path, label in listing(str(src), "validation")[1])
    assert len(held) == 2
    assert main(["train", "--model", "cifar_resnet8", "--dataset", "imagenet", "--data_dir",
                 str(dst), "--image_size", "16", "--batch_size", "4", "--train_steps", "2",
                 "--num_gpus", "0", "--no_jit_compile", "--no_export", "--quiet",
                 "--output_dir", str(tmp_path / "run")]) == 0


def test_a_validation_fraction_is_refused_where_it_cannot_apply(tmp_path):
    from tfyard.errors import UserError

    write_folder(tmp_path / "src" / "train", {"ant": 2})
    write_folder(tmp_path / "src" / "validation", {"ant": 1})
    with pytest.raises(UserError, match="src/validation is the validation split; drop "
                                        "--validation_fraction, or the folder"):
        convert_imagefolder(str(tmp_path / "src"), str(tmp_path / "a"), validation_fraction=0.2)
    with pytest.raises(UserError, match="--validation_fraction must be between 0 and 1"):
        convert_imagefolder(str(tmp_path / "src"), str(tmp_path / "b"), validation_fraction=0)
    assert sorted(os.listdir(tmp_path)) == ["src"]
