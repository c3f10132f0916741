"""Unreadable images get a row and the run goes on; bad arguments are one line, exit 2."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import run_tfyard
from tests.predict.conftest import encoded, photo
from tfyard.cli import main


@pytest.fixture
def mixed(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    good = encoded(photo("red", 1))
    (folder / "a_good.jpg").write_bytes(good)
    (folder / "b_truncated.jpg").write_bytes(good[: len(good) // 2])
    (folder / "c_text.png").write_text("not an image at all")
    (folder / "d_empty.gif").write_bytes(b"")
    (folder / "e_good.png").write_bytes(encoded(photo("blue", 2), "PNG"))
    (folder / "notes.txt").write_text("skipped: not an image name")
    return folder


def test_unreadable_files_get_an_error_row_and_are_counted(run, mixed, capsys):
    assert main(["predict", "--output_dir", str(run), str(mixed), "--top_k", "1"]) == 0
    out, err = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [os.path.basename(r["path"]) for r in rows] == [
        "a_good.jpg", "b_truncated.jpg", "c_text.png", "d_empty.gif", "e_good.png"]
    assert [bool(r["error"]) for r in rows] == [False, True, True, True, False]
    assert rows[1]["class_name"] == "" and rows[1]["top_ids"] == "[]"
    assert all(r["error"].startswith("cannot decode") for r in rows[1:4])
    # TensorFlow's eager " [Op:DecodeImage] name: " is no part of it (issue 67)
    assert rows[2]["error"] == ("cannot decode: Unknown image file format. One of JPEG, "
                                "JPEG XL, PNG, GIF, BMP, WebP required."), rows[2]
    assert not any(r["error"].endswith("name:") for r in rows), rows
    assert "predicted 2 file(s)" in err and "3 unreadable (first: " in err
    assert "b_truncated.jpg: cannot decode" in err


def test_on_error_fail_stops_with_one_line_and_no_file(run, mixed, tmp_path, capsys):
    output = tmp_path / "rows.jsonl"
    assert main(["predict", "--output_dir", str(run), str(mixed), "--output", str(output),
                 "--on_error", "fail"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "b_truncated.jpg: cannot decode" in err
    assert not output.exists() and sorted(os.listdir(tmp_path)) == ["in"]


def test_on_error_fail_into_parquet_closes_it_once(run, mixed, tmp_path):
    """Issue 67: pyarrow's writer, left open by the failure, closed itself at exit into the
    closed file: "Exception ignored in ... ParquetWriter.__del__" after the one line."""
    output = tmp_path / "rows.parquet"
    result = run_tfyard("predict", "--output_dir", run, mixed, "--output", output,
                        "--on_error", "fail")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "b_truncated.jpg: cannot decode" in lines[0], result.stderr
    assert not output.exists() and sorted(os.listdir(tmp_path)) == ["in"]


@pytest.mark.parametrize("case, words", [
    ("missing input", "does not exist"),
    ("no images", "holds no images"),
    ("glob of nothing", "matches no images"),
    ("missing run", "does not exist"),
    ("unfinished run", "holds no exported model yet"),
    ("not a run", "holds no SavedModel"),
    ("parquet to stdout", "needs --output"),
])
def test_bad_arguments_are_one_line_before_any_work(case, words, run, tmp_path, capsys):
    image = tmp_path / "x.jpg"
    image.write_bytes(encoded(photo("red", 1)))
    (tmp_path / "empty").mkdir()
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "run.json").write_text(json.dumps({"model": "cifar_resnet8"}))
    target, inputs, extra = str(run), [str(image)], []
    if case == "missing input":
        inputs = [str(tmp_path / "nope.jpg")]
    elif case == "no images":
        inputs = [str(tmp_path / "empty")]
    elif case == "glob of nothing":
        inputs = [str(tmp_path / "*.png")]
    elif case == "missing run":
        target = str(tmp_path / "no-run")
    elif case == "unfinished run":
        target = str(unfinished)
    elif case == "not a run":
        target = str(tmp_path / "empty")
    else:
        extra = ["--format", "parquet"]
    assert main(["predict", "--output_dir", target, *inputs, *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert words in captured.err


def test_a_wrong_run_answers_before_tensorflow_loads(tmp_path):
    code = ("import sys\nfrom tfyard.cli import main\n"
            f"status = main(['predict', '--output_dir', {str(tmp_path / 'none')!r}, 'x.jpg'])\n"
            "print('tensorflow' in sys.modules)\nsys.exit(status)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and result.stdout.strip() == "False"
    assert "does not exist" in result.stderr
