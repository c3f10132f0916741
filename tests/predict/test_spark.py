"""Predict on a real local Spark (local[2], one session for the module): the Python form on
a binaryFile DataFrame and `tfyard predict --on spark` give local predict's classes, the
broken file contained, each Python worker loading the model once for every batch and both
jobs; `--on_error fail` is one line naming the file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.predict.conftest import Terminal, same_as_local
from tfyard import quiet
from tfyard.cli import main
from tfyard.predict.worker import LOAD_LOG

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


def test_on_error_fail_names_the_file_in_one_line(spark, run, few, tmp_path, capsys):
    out = tmp_path / "rows"
    assert main(["predict", "--output_dir", str(run), str(few), "--on", "spark",
                 "--on_error", "fail", "--output", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("tfyard: error: file:") and "broken.jpg: cannot decode" in error
    assert not out.exists() and not list(Path(tmp_path).glob(".rows.tmp-*"))


def test_the_cli_shows_none_of_the_workers_tensorflow_log_lines(run, few, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", quiet.VERBOSE_ENV)}
    done = subprocess.run([sys.executable, "-m", "tfyard", "predict", "--output_dir", str(run),
                           str(few), "--on", "spark", "--output", str(tmp_path / "rows")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "predicted 8 file(s)" in done.stderr
    assert not re.search(quiet.LOG_PREFIX, done.stderr) and quiet.ABSL_BANNER not in done.stderr
