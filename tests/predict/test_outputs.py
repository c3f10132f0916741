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
    inputs = _copies(tmp_path, 2000, size=(640, 480))
    output = tmp_path / "out" / "rows.csv"
    output.parent.mkdir()
    process = _writing_predict(run, inputs, output)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert os.listdir(output.parent) == []


def _writing_predict(run, inputs, output) -> subprocess.Popen:
    """`tfyard predict` in a fresh process, once it is writing its table."""
    process = subprocess.Popen([sys.executable, "-m", "tfyard", "predict", "--output_dir",
                                str(run), str(inputs), "--output", str(output)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not _writing(process.pid, output.parent) and time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        time.sleep(0.02)
    return process


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


def _copies(tmp_path, count: int, **size):
    """A folder of `count` links to one photo."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "0.jpg").write_bytes(encoded(photo("green", 1, **size)))
    for i in range(1, count):
        os.link(inputs / "0.jpg", inputs / f"{i}.jpg")
    return inputs


def _predict(run, inputs, output):
    """`tfyard predict` in a fresh process that kills itself (SIGKILL) between its two
    renames: once the table has its temporary name, before it takes the output's."""
    kill = ("import os, sys; replace = os.replace\n"
            "def killed(source, target):\n"
            f"    if target == {str(output)!r}: os.kill(os.getpid(), 9)\n"
            "    replace(source, target)\n"
            "os.replace = killed\n"
            "from tfyard.cli import main; sys.exit(main(sys.argv[1:]))")
    return subprocess.Popen([sys.executable, "-c", kill, "predict", "--output_dir", str(run),
                             str(inputs), "--output", str(output)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_a_predict_killed_between_its_renames_keeps_the_previous_table(run, folder, tmp_path):
    """Polled while it runs, the previous table is there, whole, at every moment; the rerun
    replaces it and removes what the killed one left."""
    output = tmp_path / "rows.csv"
    assert main(["predict", "--output_dir", str(run), str(folder / "validation" / "*" / "1.jpg"),
                 "--output", str(output)]) == 0
    previous = output.read_bytes()
    child, seen = _predict(run, folder / "validation", output), set()
    while child.poll() is None:
        seen.add(output.read_bytes() == previous)
        time.sleep(0.005)
    assert child.returncode == -signal.SIGKILL, child.stderr.read().decode()[-2000:]
    assert seen == {True} and output.read_bytes() == previous
    [leftover] = [p.name for p in tmp_path.iterdir() if p.name != output.name]
    assert leftover.startswith(".rows.csv.tmp-")   # the complete table, never named
    assert main(["predict", "--output_dir", str(run), str(folder / "validation"),
                 "--output", str(output)]) == 0
    assert len(output.read_text().splitlines()) == 1 + 24
    assert os.listdir(tmp_path) == [output.name]


def test_two_predicts_into_one_output_both_finish_with_one_whole_table(run, folder, tmp_path):
    inputs = _copies(tmp_path, 300)
    output = tmp_path / "out" / "rows.csv"
    output.parent.mkdir()
    first = _writing_predict(run, inputs, output)
    first.send_signal(signal.SIGSTOP)   # in the middle of its table while the second runs
    try:
        assert main(["predict", "--output_dir", str(run), str(folder / "validation"),
                     "--output", str(output)]) == 0
        assert len(output.read_text().splitlines()) == 1 + 24
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait() == 0, first.stderr.read().decode()[-2000:]
    assert len(output.read_text().splitlines()) == 1 + 300
    assert os.listdir(output.parent) == [output.name]


def test_an_output_that_cannot_be_written_is_refused_before_the_work(run, folder, tmp_path,
                                                                     capsys):
    image = str(folder / "validation" / "red" / "0.jpg")
    for output, reason in ((tmp_path, "it is a directory; give a file name"),
                           (tmp_path / "no" / "rows.csv", "its directory"),
                           ("/sys/rows.csv" if os.geteuid() == 0 else "/rows.csv",
                            "/sys cannot be written (" if os.geteuid() == 0 else
                            "/ cannot be written (")):
        assert main(["predict", "--output_dir", str(run), image, "--output",
                     str(output)]) == 2
        error = capsys.readouterr().err
        assert error.startswith(f"tfyard: error: cannot write --output {output}: {reason}")
        assert error.count("\n") == 1
    assert main(["predict", "--output_dir", str(run), image, "--on", "ray", "--output",
                 image]) == 2
    assert capsys.readouterr().err == (f"tfyard: error: cannot write --output {image}: it is "
                                       "a file; give a directory\n")


def test_a_closed_pipe_ends_predict_quietly(run, tmp_path):
    """`tfyard predict RUN DIR | head -1`: no traceback, the status of a SIGPIPE."""
    inputs = _copies(tmp_path, 1000)
    child = subprocess.Popen([sys.executable, "-m", "tfyard", "predict", "--output_dir",
                              str(run), str(inputs)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    assert child.stdout.readline().startswith(b"path,")
    child.stdout.close()
    assert child.wait(timeout=300) == 128 + signal.SIGPIPE
    assert child.stderr.read() == b""


def test_a_disk_failure_during_predict_says_what_predict_needs(run, folder, monkeypatch,
                                                               capsys):
    monkeypatch.setattr(sys, "stdout", open("/dev/full", "w"))   # every write: ENOSPC
    assert main(["predict", "--output_dir", str(run), str(folder / "validation")]) == 2
    error = capsys.readouterr().err
    assert error == ("tfyard: error: cannot write to disk (No space left on device); free "
                     "space or choose a writable --output, then rerun (a previous output is "
                     "untouched)\n")
