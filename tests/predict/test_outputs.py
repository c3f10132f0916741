"""Tables: csv, jsonl and parquet written as the rows come; a file appears only complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.predict.conftest import encoded, photo
from tfyard.cli import main


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_each_format_is_written_whole(fmt, run, folder, tmp_path, capsys):
    output = tmp_path / f"rows.{fmt}"
    assert main(["predict", "--output_dir", str(run / "export"),
                 str(folder / "validation" / "*" / "1.jpg"), "--output", str(output)]) == 0
    assert f"wrote {output}" in capsys.readouterr().err
    if fmt == "parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(output).to_pylist()
    elif fmt == "jsonl":
        rows = [json.loads(line) for line in output.read_text().splitlines()]
    else:
        rows = output.read_text().splitlines()[1:]
    assert len(rows) == 3 and sorted(os.listdir(tmp_path)) == [output.name]
    if fmt != "csv":
        assert [len(r["top_names"]) for r in rows] == [3, 3, 3] and rows[0]["error"] == ""


def test_a_killed_predict_leaves_no_file(run, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "0.jpg").write_bytes(encoded(photo("green", 1, size=(640, 480))))
    for i in range(1, 2000):
        os.link(inputs / "0.jpg", inputs / f"{i}.jpg")
    output = tmp_path / "out" / "rows.csv"
    output.parent.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "tfyard", "predict", "--output_dir",
                                str(run), str(inputs), "--output", str(output)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not _writing(process.pid, output.parent) and time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert os.listdir(output.parent) == []


def _writing(pid: int, directory) -> bool:
    """Whether `pid` holds a file open in `directory` (the unnamed table being written)."""
    fds = f"/proc/{pid}/fd"
    try:
        return any(os.readlink(os.path.join(fds, fd)).startswith(str(directory) + "/")
                   for fd in os.listdir(fds))
    except OSError:
        return False


def test_the_final_line_gives_a_slow_rate_in_tenths():
    from tfyard.predict.local import Outcome

    assert "(0.5 files/s)" in Outcome(predicted=9, seconds=18.1).line(None)
    assert "(224 files/s); wrote rows/" in Outcome(predicted=6000, seconds=26.8).line("rows/")
