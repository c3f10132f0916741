"""Predict on a real local Ray (2 CPUs on 127.0.0.1, shared with the Ray tests beside it):
the Python form on a read_binary_files Dataset gives local predict's classes, the broken
file, a null and an empty cell contained, each actor loading the model once for all its
batches; `tfyard predict --on ray` SIGKILLed while it writes, then rerun into the same
--output, leaves every row once, under local predict's progress bar; every format (parquet
into a bucket, jsonl from an actor a CPU, csv) and every edge item (the edge tree; a vanished
file and a null cell read from a Dataset of paths) gives local predict's rows; images in a
gs:// bucket are scored into it; a worker's refusal is one line.

Each job's actors import TensorFlow and load the model (~10 s of a CPU each), so the
promises share jobs: one job a format, one actor where parallelism is not the point."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from tests.predict.conftest import (  # noqa: E402
    Terminal,
    edge_items,
    listed,
    read_rows,
    same_as_local,
    summary,
)
from tests.storage.conftest import gcs_upload  # noqa: E402
from tfyard.cli import main  # noqa: E402
from tfyard.predict.worker import LOAD_LOG  # noqa: E402

pytestmark = pytest.mark.ray


def test_images_in_a_bucket_are_scored_into_the_bucket(ray_address, run, few, local_classes,
                                                       gcs):
    """INPUT and --output in a gs:// bucket: each actor reads its images from the bucket
    (the driver's store settings travel with the job); the part files are uploaded once all
    are written."""
    import io

    import pyarrow.parquet as pq

    gcs_upload(gcs, few, "photos", "day-1")
    assert main(["predict", "--output_dir", str(run), "gs://photos/day-1", "--on", "ray",
                 "--address", ray_address, "--workers", "1", "--output",
                 "gs://photos/scored"]) == 0
    rows = [row for blob in gcs.list_blobs("photos", prefix="scored/")
            if blob.name.endswith(".parquet")
            for row in pq.read_table(io.BytesIO(blob.download_as_bytes())).to_pylist()]
    assert sorted(row["path"] for row in rows) == sorted(
        f"gs://photos/day-1/{p.name}" for p in few.iterdir())
    same_as_local(rows, local_classes)


def test_python_form_agrees_with_local_loading_once_per_actor(ray_address, run, few,
                                                              local_classes, tmp_path,
                                                              monkeypatch):
    import pyarrow as pa

    import tfyard.ray

    log = tmp_path / "loads.txt"
    monkeypatch.setenv(LOAD_LOG, str(log))
    cells = ray.data.from_arrow(pa.table({"path": ["a.jpg", "b.jpg"]}).append_column(
        pa.field("bytes", pa.binary()), pa.array([None, b""], pa.binary())))
    images = ray.data.read_binary_files(str(few), include_paths=True).union(cells)
    rows = tfyard.ray.predict(images, run, batch_size=1, workers=1).drop_columns(
        ["bytes"]).take_all()   # 4 rows a call: 3 calls for the one actor
    same_as_local([row for row in rows if row["path"] not in ("a.jpg", "b.jpg")],
                  local_classes)
    assert sorted((r["path"], r["error"]) for r in rows if r["path"] in ("a.jpg", "b.jpg")) \
        == [("a.jpg", "no image (the cell is null)"),
            ("b.jpg", "cannot decode: it is empty (0 bytes)")]
    assert len(log.read_text().splitlines()) == 1


def test_killed_and_rerun_into_the_same_output_leaves_every_row_once(ray_address, run, few,
                                                                    local_classes, tmp_path,
                                                                    monkeypatch):
    out = tmp_path / "rows"
    command = [sys.executable, "-m", "tfyard", "predict", "--output_dir", str(run), str(few),
               "--on", "ray", "--address", ray_address, "--workers", "1", "--batch_size", "1",
               "--output", str(out)]
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".rows.tmp-*/*")) and job.poll() is None:
        assert time.monotonic() < deadline, "the job wrote nothing in 120 s"
        time.sleep(0.05)
    job.send_signal(signal.SIGKILL)
    assert job.wait() == -signal.SIGKILL and not out.exists()

    monkeypatch.setattr(sys, "stderr", Terminal())   # rerun as jsonl, by an actor a CPU
    assert main(["predict", "--output_dir", str(run), str(few), "--on", "ray",
                 "--batch_size", "1", "--format", "jsonl", "--output", str(out)]) == 0
    assert "9/9" in sys.stderr.getvalue()  # local predict's bar, fed by the actors' counts
    assert len(list(out.iterdir())) >= 2   # each actor's parts, merged into one table
    same_as_local(read_rows(out, "jsonl"), local_classes)
    assert [p.name for p in Path(tmp_path).iterdir() if p.name.startswith(".")] == []


def test_every_edge_item_gives_local_rows_as_csv_and_from_paths(ray_address, run, edges,
                                                                edge_rows, tmp_path):
    """The edge tree as csv (parquet and jsonl are the tests above); the edge items as a
    Dataset of paths, which the actors read themselves."""
    import tfyard.ray

    out = tmp_path / "csv"
    assert main(["predict", "--output_dir", str(run), str(edges), "--on", "ray",
                 "--format", "csv", "--output", str(out)]) == 0
    assert summary(read_rows(out, "csv")) == listed(edge_rows)

    paths = ray.data.from_items([{"path": item} for item in edge_items(edges)])
    assert summary(tfyard.ray.predict(paths, run, workers=1).take_all()) == edge_rows


def test_a_dataset_of_no_rows_is_said_in_one_line(ray_address, run, caplog):
    """Issue 67: 0 rows were scored in silence."""
    import tfyard.ray

    nothing = ray.data.from_items([{"path": "a.jpg"}]).limit(0)   # what a filter may leave
    with caplog.at_level("WARNING", logger="tfyard"):
        tfyard.ray.predict(nothing, run, workers=1)   # lazy: no actor starts
    assert caplog.messages == [
        "tfyard: warning: the Dataset has no rows, so nothing is scored; check the paths "
        "given to ray.data.read_binary_files and any filter"]


def test_a_workers_refusal_is_one_line_in_a_fresh_process(ray_address, old_export, few,
                                                          tmp_path):
    done = subprocess.run([sys.executable, "-m", "tfyard", "predict", "--output_dir",
                           str(old_export), str(few), "--on", "ray", "--address", ray_address,
                           "--output", str(tmp_path / "rows")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"tfyard: error: {old_export} was exported by a tfyard without prediction support (no "
        "`metadata` signature); export it again with this tfyard")
    # what else is there, Ray's core worker prints on every run (its constructor-argument note)
    assert "Traceback" not in done.stderr and "ERROR" not in done.stderr
