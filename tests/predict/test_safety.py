"""Predicting reads the SavedModel's graph only; Python callers get rows, bytes in too."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

import tfyard
from tests.predict.conftest import encoded, photo
from tfyard.errors import UserError


def test_a_module_the_run_names_is_never_imported(run, folder, tmp_path, monkeypatch):
    copy = tmp_path / "sent"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("checkpoints", "logs"))
    marker = tmp_path / "imported"
    (copy / "planted.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                     "def build(num_classes):\n    raise SystemExit(9)\n")
    record = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**record, "model": "planted:build"}))
    monkeypatch.syspath_prepend(str(copy))
    monkeypatch.chdir(copy)
    rows = tfyard.predict(copy, folder / "validation" / "red" / "0.jpg")
    assert rows[0]["class_name"] in ("blue", "green", "red")
    assert "planted" not in sys.modules and not marker.exists()


def test_in_memory_images_and_files_mix_in_order(run, folder):
    jpeg = encoded(photo("red", 7))
    rows = tfyard.predict(str(run), [jpeg, str(folder / "validation" / "blue"), b"junk"],
                          top_k=1, batch_size=3)
    assert [row["path"] for row in rows][0] is None and rows[-1]["path"] is None
    assert len(rows) == 10 and rows[-1]["error"].startswith("cannot decode")
    assert rows[0]["top_ids"] == [rows[0]["class_id"]] and rows[0]["error"] == ""
    with pytest.raises(UserError, match="cannot decode"):
        tfyard.predict(run, [jpeg, b""], on_error="fail")


def test_a_wrong_number_of_class_names_stops_before_training(folder, tmp_path):
    with pytest.raises(UserError, match="2 class names for 3 classes"):
        tfyard.fit("cifar_resnet8", "imagefolder", data_dir=str(folder), image_size=16,
                   output_dir=str(tmp_path / "out"), class_names=["a", "b"], train_steps=1,
                   num_gpus="0", jit_compile=False, quiet=True)
