"""Predict on a real local Ray (2 CPUs on 127.0.0.1, one for the module): the Python form on
a read_binary_files Dataset gives local predict's classes, the broken file contained, each
actor loading the model once for all its batches; `tfyard predict --on ray` SIGKILLed while
it writes, then rerun into the same --output, leaves every row once, under local predict's
progress bar."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from tests.predict.conftest import Terminal, same_as_local  # noqa: E402
from tfyard.cli import main  # noqa: E402
from tfyard.predict.worker import LOAD_LOG  # noqa: E402

pytestmark = pytest.mark.ray


def test_python_form_agrees_with_local_loading_once_per_actor(ray_address, run, few,
                                                              local_classes, tmp_path,
                                                              monkeypatch):
    import tfyard.ray

    log = tmp_path / "loads.txt"
    monkeypatch.setenv(LOAD_LOG, str(log))
    images = ray.data.read_binary_files(str(few), include_paths=True)
    scored = tfyard.ray.predict(images, run, batch_size=1, workers=2)  # 2 files a batch
    same_as_local(scored.drop_columns(["bytes"]).take_all(), local_classes)
    pids = [line.split()[1] for line in log.read_text().splitlines()]
    assert 1 <= len(pids) <= 2 and len(set(pids)) == len(pids)
    by_path = tfyard.ray.predict(images.select_columns(["path"]), run, workers=2)
    same_as_local(by_path.take_all(), local_classes)  # the actors read the files themselves


def test_killed_and_rerun_into_the_same_output_leaves_every_row_once(ray_address, run, few,
                                                                    local_classes, tmp_path,
                                                                    monkeypatch):
    import pyarrow.parquet as pq

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

    monkeypatch.setattr(sys, "stderr", Terminal())
    assert main(["predict", "--output_dir", str(run), str(few), "--on", "ray",
                 "--batch_size", "1", "--output", str(out)]) == 0
    assert "9/9" in sys.stderr.getvalue()  # local predict's bar, fed by the actors' counts
    same_as_local(pq.read_table(out).to_pylist(), local_classes)
    assert [p.name for p in Path(tmp_path).iterdir() if p.name.startswith(".")] == []
