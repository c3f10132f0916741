"""Predict on a real local Spark (local[2], one session for the module): the Python form on
a binaryFile DataFrame and `tfyard predict --on spark` give local predict's classes, the
broken file contained, each Python worker loading the model once for every batch and both
jobs; `--on_error fail` is one line naming the file; every format and every edge item
(a null cell, a vanished file, the edge tree) gives local predict's rows; a worker's refusal
and workers without tfyard are one line.

The session's jobs run one after another, those that fail a task last (Spark drops a Python
worker whose task failed, and the next job's new one would import TensorFlow and load the
model again), then the fresh processes."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.predict.conftest import Terminal, edge_items, listed, read_rows, same_as_local, summary
from tests.storage.conftest import upload
from tfyard import quiet
from tfyard.cli import main
from tfyard.predict.worker import LOAD_LOG
from tfyard.quiet import log_filter

pyspark = pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    from tfyard.launch.spark import spark_context

    with spark_context("local[2]", ["spark.ui.enabled=false"]) as sc:
        sc.setLogLevel("ERROR")
        yield SparkSession(sc)


def test_python_form_and_cli_agree_with_local_loading_once_per_worker(
        spark, run, few, local_classes, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    import tfyard.spark

    log = tmp_path / "loads.txt"
    monkeypatch.setenv(LOAD_LOG, str(log))
    images = spark.read.format("binaryFile").load(str(few)).repartition(4)  # 2 tasks a worker
    scored = tfyard.spark.predict(images, run, batch_size=1)
    assert {"path", "content", "class_name", "top_scores", "error"} <= set(scored.columns)
    same_as_local([row.asDict() for row in scored.drop("content").collect()], local_classes)
    by_path = tfyard.spark.predict(images.select("path"), run, batch_size=1)  # read by workers
    same_as_local([row.asDict() for row in by_path.collect()], local_classes)

    out = tmp_path / "rows"
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert main(["predict", "--output_dir", str(run), str(few), "--on", "spark",
                 "--batch_size", "1", "--output", str(out)]) == 0
    assert "9/9" in sys.stderr.getvalue()  # local predict's bar, fed by an accumulator
    same_as_local(pq.read_table(out).to_pylist(), local_classes)
    assert pq.read_table(out).column_names == ["path", "class_id", "class_name", "score",
                                               "top_ids", "top_names", "top_scores", "error"]
    pids = [line.split()[1] for line in log.read_text().splitlines()]
    assert 1 <= len(pids) <= 2 and len(set(pids)) == len(pids)  # 2 jobs, 8 tasks


def test_images_in_a_bucket_are_scored_into_a_bucket(spark, run, few, local_classes, s3):
    """INPUT and --output in an S3 bucket: the workers read each image from the bucket
    themselves; the part files are uploaded once all are written."""
    import pyarrow.parquet as pq

    upload(s3, few, "photos", "day-1")
    assert main(["predict", "--output_dir", str(run), "s3://photos/day-1", "--on", "spark",
                 "--output", "s3://photos/scored"]) == 0
    parts = [item["Key"] for item in s3.list_objects_v2(Bucket="photos", Prefix="scored/")[
        "Contents"] if item["Key"].endswith(".parquet")]
    rows = [row for key in parts for row in pq.read_table(
        io.BytesIO(s3.get_object(Bucket="photos", Key=key)["Body"].read())).to_pylist()]
    assert sorted(row["path"] for row in rows) == sorted(
        f"s3://photos/day-1/{p.name}" for p in few.iterdir())
    same_as_local(rows, local_classes)


def test_every_format_and_edge_item_gives_local_rows(spark, run, edges, edge_rows, tmp_path):
    import tfyard.spark

    for fmt in ("csv", "jsonl", "parquet"):
        out = tmp_path / fmt
        assert main(["predict", "--output_dir", str(run), str(edges), "--on", "spark",
                     "--format", fmt, "--output", str(out)]) == 0
        assert summary(read_rows(out, fmt)) == listed(edge_rows), fmt

    paths = spark.createDataFrame([(item,) for item in edge_items(edges)], "path string")
    assert summary(r.asDict() for r in tfyard.spark.predict(paths, run).collect()) == edge_rows
    cells = spark.createDataFrame([("a.jpg", None), ("b.jpg", b"")], "path string, content binary")
    rows = [r.asDict() for r in tfyard.spark.predict(cells, run, top_k=2).collect()]
    assert [(r["path"], r["error"]) for r in rows] == [
        ("a.jpg", "no image (the cell is null)"), ("b.jpg", "cannot decode: it is empty (0 bytes)")]


def test_a_frame_of_no_rows_is_said_in_one_line(spark, run, folder, caplog):
    """Issue 67: binaryFile on a folder of class folders reads none of their files without
    recursiveFileLookup, and 0 rows were scored in silence. The docs' recipe reads them."""
    import tfyard.spark

    classes = str(folder / "validation")
    flat = spark.read.format("binaryFile").load(classes)
    with caplog.at_level("WARNING", logger="tfyard"):
        scored = tfyard.spark.predict(flat, run)
    assert caplog.messages == [
        "tfyard: warning: the DataFrame has no rows, so nothing is scored; binaryFile reads the "
        "files of the folder given, not of its subfolders: add .option('recursiveFileLookup', "
        "'true') for a folder of class folders"]
    assert scored.count() == 0
    recursive = spark.read.format("binaryFile").option("recursiveFileLookup", "true")
    assert recursive.load(classes).select("path").count() == 24


def test_on_error_fail_names_the_file_in_one_line(spark, run, few, tmp_path, capsys):
    out = tmp_path / "rows"
    assert main(["predict", "--output_dir", str(run), str(few), "--on", "spark",
                 "--on_error", "fail", "--output", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"tfyard: error: {few}/broken.jpg: cannot decode")
    assert not out.exists() and not list(Path(tmp_path).glob(".rows.tmp-*"))


def test_workers_without_tfyard_are_one_line(spark, run, tmp_path, monkeypatch):
    import tfyard.spark
    from tfyard.errors import UserError

    bare = tmp_path / "python"   # the same Python without site-packages: no tfyard
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", str(bare))
    frame = spark.createDataFrame([("a.jpg",)], "path string")
    with pytest.raises(UserError, match=r"^Spark's Python workers \(.*python\) cannot import "
                                        r"tfyard; set spark.pyspark.python \(or PYSPARK_PYTHON\)"):
        tfyard.spark.predict(frame, run)


def test_the_cli_shows_none_of_the_workers_tensorflow_log_lines(run, few, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", quiet.VERBOSE_ENV)}
    done = subprocess.run([sys.executable, "-m", "tfyard", "predict", "--output_dir", str(run),
                           str(few), "--on", "spark", "--workers", "1", "--output",
                           str(tmp_path / "rows")],   # one worker: one TensorFlow to start
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "predicted 8 file(s)" in done.stderr
    assert not re.search(log_filter.LOG_PREFIX, done.stderr)
    assert log_filter.ABSL_BANNER not in done.stderr


def test_a_workers_refusal_is_one_line_in_a_fresh_process(old_export, few, tmp_path):
    done = subprocess.run([sys.executable, "-m", "tfyard", "predict", "--output_dir",
                           str(old_export), str(few), "--on", "spark", "--workers", "1",
                           "--output", str(tmp_path / "rows")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"tfyard: error: {old_export} was exported by a tfyard without prediction support (no "
        "`metadata` signature); export it again with this tfyard")
    assert "Traceback" not in done.stderr and "ERROR" not in done.stderr  # Spark's start-up only
