"""Bad data reaching `tfyard train`: one line naming the file and record, or skipped and counted.
Each run goes through the CLI's `main` in the test's process (no fresh interpreter needed)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import run_here
from tests.data.helpers import image_bytes, tf_example, write_records
from tests.train.conftest import read_json

FLAGS = ["--model", "mnist_mlp", "--dataset", "tfrecord", "--image_size", "28", "--batch_size",
         "4", "--train_steps", "3", "--num_gpus", "0", "--quiet", "--no_export"]


def slim_dataset(root, bad_record: bytes | None = None, labels=(0, 1, 2, 0, 1, 2, 0, 1)):
    """A slim-layout dataset whose train shard may hold one bad record (at index 2)."""
    root.mkdir()
    records = [tf_example(image_bytes(np.full((8, 8, 3), 30 * (lab % 8), np.uint8)), lab)
               for lab in labels]
    if bad_record is not None:
        records[2] = bad_record
    write_records(root / "d_train_00000-of-00001.tfrecord", records)
    write_records(root / "d_validation_00000-of-00001.tfrecord", records[3:])
    (root / "labels.txt").write_text("0:a\n1:b\n2:c\n")
    return root / "d_train_00000-of-00001.tfrecord"


def train(capsys, data, out, *extra):
    return run_here(capsys, "train", *FLAGS, "--data_dir", data, "--output_dir", out, *extra)


def test_an_image_that_is_not_an_image_is_named_then_skipped_and_counted(tmp_path, capsys):
    shard = slim_dataset(tmp_path / "data", tf_example(b"this is not a JPEG", 1))
    refused = train(capsys, tmp_path / "data", tmp_path / "out")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(f"tfyard: error: {shard}: record 2") and "--skip_corrupt" in last
    skipped = train(capsys, tmp_path / "data", tmp_path / "out2", "--skip_corrupt")
    assert skipped.returncode == 0, skipped.stderr[-2000:]
    summary = read_json(tmp_path / "out2" / "summary.json")
    assert summary["skipped_records"] == 1 and summary["final_step"] == 3


@pytest.mark.parametrize("case", ["truncated", "label"])
def test_truncated_shards_and_labels_out_of_range_are_one_line(tmp_path, case, capsys):
    labels = (0, 1, 7, 0, 1, 2, 0, 1) if case == "label" else (0, 1, 2, 0, 1, 2, 0, 1)
    shard = slim_dataset(tmp_path / "data", labels=labels)
    if case == "truncated":
        shard.write_bytes(shard.read_bytes()[:-30])
    result = train(capsys, tmp_path / "data", tmp_path / "out")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("tfyard: error:") and str(shard) in last
    assert ("truncated" in last) if case == "truncated" else ("label 7" in last)


def test_a_folder_without_validation_holds_some_out_and_runs_to_the_end(tmp_path, capsys):
    from tests.data.helpers import write_folder

    write_folder(tmp_path / "photos", {"ant": 10, "bee": 10, "cat": 10})
    flags = ["--model", "mnist_mlp", "--dataset", "folder", "--image_size", "28",
             "--batch_size", "4", "--train_steps", "4", "--num_gpus", "0"]
    result = run_here(capsys, "train", *flags, "--data_dir", tmp_path / "photos",
                      "--output_dir", tmp_path / "out")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "tfyard: note: no validation/ folder in" in result.stdout
    assert "holding out 3 of the 30 images" in result.stdout
    summary = read_json(tmp_path / "out" / "summary.json")
    assert summary["dataset"] == "imagefolder" and summary["eval"] is not None
    assert (tmp_path / "out" / "export" / "model.keras").exists()
