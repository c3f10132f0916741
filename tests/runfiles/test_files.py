"""The run directory's seam: the layout names every file a run writes, and the file
operations behave as the lease, the reports and the checkpoints rely on."""

from __future__ import annotations

import os

import pytest

from tests.storage.conftest import gcs, gcs_endpoint, s3, s3_endpoint  # noqa: F401 - used here
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


@pytest.fixture(params=["local", "s3", "gs"])
def run_place(request, tmp_path) -> str:
    """A run's place: a local directory, a prefix on the suite's S3 server, or one on its
    GCS emulator."""
    if request.param == "local":
        return str(tmp_path / "run")
    client = request.getfixturevalue("s3" if request.param == "s3" else "gcs")
    bucket = f"seam-{request.node.callspec.id.split('-')[-1]}-{os.getpid()}"
    if request.param == "s3":
        client.create_bucket(Bucket=bucket)
    else:
        client.create_bucket(bucket)
    return f"{request.param}://{bucket}/runs/run"


def test_the_same_calls_read_and_write_a_directory_and_a_bucket_alike(run_place):
    """One seam: what tune, a study's lookup and run.json's amend call is the same for a
    local run and a bucket run, and means the same."""
    run = RunDirectory(run_place)
    files = run.files
    assert not files.has(run.root) and files.read_from(run.metrics, 0) == b""
    files.make_directory(run.checkpoints)
    files.write_whole(run.metrics, '{"step": 1}\n')
    files.write_whole(run.path("checkpoints", "ckpt-2.index"), b"i")
    files.write_whole(run.path("checkpoints", "ckpt-10.index"), b"i")
    files.write_whole(run.path("checkpoints", "ckpt-10.data-00000-of-00001"), b"d")
    if not run_place.startswith("gs://"):   # the emulator ignores preconditions (test_gcs)
        with pytest.raises(FileExistsError):
            files.write_whole(run.metrics, "other", exclusive=True)
    assert files.has(run.root) and files.is_directory(run.checkpoints)
    assert not files.is_directory(run.metrics) and not files.has(run.summary)
    assert files.read_whole(run.metrics) == '{"step": 1}\n'
    assert files.read_from(run.metrics, 2) == b'step": 1}\n' and files.size(run.metrics) == 12
    assert not files.ends_torn(run.metrics)
    assert sorted(files.matching(run.path("checkpoints", "ckpt-*.index"))) == [
        run.path("checkpoints", "ckpt-10.index"), run.path("checkpoints", "ckpt-2.index")]
    assert files.matching(run.path("*.index")) == []        # never across a folder
    assert files.matching(run.metrics) == [run.metrics]
    files.amend(run.run_file, lambda body: (body or b"") + b"a")
    files.amend(run.run_file, lambda body: (body or b"") + b"b")
    files.amend(run.run_file, lambda body: None)            # left as it is
    assert files.read_whole(run.run_file) == "ab"
    assert files.age(run.run_file) < 600
    files.remove(run.path("checkpoints", "ckpt-2.index"))   # one file, its folder kept
    assert files.matching(run.path("checkpoints", "ckpt-2*")) == []
    assert files.is_directory(run.checkpoints)
    files.delete(run.checkpoints)
    assert not files.has(run.checkpoints) and files.has(run.metrics)


@pytest.mark.usefixtures("s3")
def test_a_bucket_refuses_what_only_a_directory_can_do():
    files = files_for("s3://seam-refusals/run")
    assert files.remote and files.lag_s > 0
    for operation in (files.move, files.hard_link, files.copy):
        with pytest.raises(OSError, match="local copy"):
            operation("s3://seam-refusals/run/a", "s3://seam-refusals/run/b")
