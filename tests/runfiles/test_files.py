"""The run directory's seam: the layout names every file a run writes, and the file
operations behave as the lease, the reports and the checkpoints rely on."""

from __future__ import annotations

import os

import pytest

from tfyard.runfiles.files import LocalFiles, TensorFlowFiles, files_for
from tfyard.runfiles.layout import RunDirectory


def test_the_layout_names_each_file_of_a_run(tmp_path):
    run = RunDirectory(str(tmp_path))
    assert [os.path.relpath(p, tmp_path) for p in (
        run.run_file, run.summary, run.metrics, run.checkpoints, run.export,
        run.exported_model, run.curves, run.lease)] == [
        "run.json", "summary.json", "metrics.jsonl", "checkpoints", "export",
        os.path.join("export", "model.keras"), "curves.png", ".tfyard-lease"]
    assert type(run.files) is LocalFiles
    assert type(RunDirectory("hdfs://namenode/run").files) is TensorFlowFiles


def test_local_writes_are_whole_and_an_exclusive_one_never_overwrites(tmp_path):
    files, path = files_for(str(tmp_path)), str(tmp_path / "lease")
    files.write_whole(path, "first")
    with pytest.raises(FileExistsError):
        files.write_whole(path, "second", exclusive=True)
    assert files.read_whole(path) == "first"
    assert sorted(os.listdir(tmp_path)) == ["lease"]          # no staging left behind
    with pytest.raises(FileExistsError):
        files.hard_link(path, path)


def test_a_torn_last_line_is_seen_and_an_append_starts_after_it(tmp_path):
    files, path = LocalFiles(), str(tmp_path / "metrics.jsonl")
    assert not files.ends_torn(path)                          # missing
    with files.appending(path) as handle:
        handle.write('{"step": 1}\n{"st')
    assert files.ends_torn(path)
    with files.appending(path) as handle:
        handle.write('\n{"step": 2}\n')
    assert not files.ends_torn(path)
    assert files.read_whole(path).splitlines()[-1] == '{"step": 2}'


def test_matching_and_delete_take_files_and_whole_directories(tmp_path):
    files = LocalFiles()
    (tmp_path / "ckpt-5_temp").mkdir()
    (tmp_path / "ckpt-5_temp" / "part").write_text("x")
    (tmp_path / "ckpt-5.index").write_text("x")
    found = sorted(files.matching(str(tmp_path / "ckpt-5*")))
    assert [os.path.basename(p) for p in found] == ["ckpt-5.index", "ckpt-5_temp"]
    for path in found:
        files.delete(path)
    assert not os.listdir(tmp_path)


def test_a_remote_store_refuses_the_lease_operations():
    files = TensorFlowFiles()
    assert files.remote
    for operation in (files.move, files.hard_link):
        with pytest.raises(OSError, match="remote path"):
            operation("hdfs://namenode/a", "hdfs://namenode/b")
