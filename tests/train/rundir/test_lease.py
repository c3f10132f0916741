"""The run directory's lease rules, on real files (the process tests are in
tests/reliability/test_run_directory.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from tfyard.distribute.cluster import parse_tf_config
from tfyard.distribute.jobid import JOB_ENV
from tfyard.errors import UserError
from tfyard.runfiles.layout import LEASE as LEASE_FILE
from tfyard.train.rundir.lease import (
    ENDING_S,
    TIMEOUT_ENV,
    Why,
    claimant,
    stale_reason,
    take_lease,
)

SINGLE = parse_tf_config(None)


def held(directory, age=0.0, **fields):
    path = directory / LEASE_FILE
    path.write_text(json.dumps({"host": "elsewhere", "pid": 1, "pid_start": "1",
                                "started": time.time(), "job": None, "token": "theirs",
                                **fields}))
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_a_silent_holder_elsewhere_is_taken_over_only_after_the_timeout(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "30")
    held(tmp_path, age=5)
    with pytest.raises(UserError, match=r"in use by another run \(host elsewhere, pid 1"):
        take_lease(str(tmp_path), SINGLE)
    held(tmp_path, age=31)
    with take_lease(str(tmp_path), SINGLE) as lease:
        assert json.loads((tmp_path / LEASE_FILE).read_text())["token"] == lease.me["token"]
    assert not (tmp_path / LEASE_FILE).exists()
    assert sorted(os.listdir(tmp_path)) == []   # no temporary or stale names left


def test_the_same_launcher_job_dead_pids_reused_pids_and_garbled_leases_are_taken(
        tmp_path, monkeypatch):
    monkeypatch.setenv(JOB_ENV, "job-7")
    held(tmp_path, job="job-7")                              # a launcher's restart
    take_lease(str(tmp_path), SINGLE).release()
    monkeypatch.delenv(JOB_ENV)
    here = socket.gethostname()
    held(tmp_path, host=here, pid=2 ** 22 + 1)               # no such process
    take_lease(str(tmp_path), SINGLE).release()
    held(tmp_path, host=here, pid=1, pid_start="no")         # pid 1 is another process now
    take_lease(str(tmp_path), SINGLE).release()
    (tmp_path / LEASE_FILE).write_text("{torn")
    take_lease(str(tmp_path), SINGLE).release()


def test_only_the_writer_takes_it(tmp_path):
    held(tmp_path)
    worker = parse_tf_config({"cluster": {"chief": ["a:1"], "worker": ["b:1"]},
                              "task": {"type": "worker", "index": 0}})
    evaluator = parse_tf_config({"cluster": {"chief": ["a:1"], "evaluator": ["c:1"]},
                                 "task": {"type": "evaluator", "index": 0}})
    for reader in (worker, evaluator):
        with take_lease(str(tmp_path), reader):
            assert json.loads((tmp_path / LEASE_FILE).read_text())["token"] == "theirs"


def test_an_output_dir_that_cannot_be_written_is_refused_before_anything(tmp_path):
    place = "/sys/kernel" if os.geteuid() == 0 else str(tmp_path)   # /sys refuses root too
    if os.geteuid() != 0:
        tmp_path.chmod(0o500)
    with pytest.raises(UserError, match=f"^cannot write --output_dir {place}: {place} cannot "
                       r"be written \(Permission denied\); choose a writable place$"):
        take_lease(place, SINGLE)


def test_the_holder_removes_what_killed_writes_left(tmp_path):
    (tmp_path / ".summary.json.tmp-5f1e").write_text("{")   # a killed JSON write
    (tmp_path / "checkpoints" / "ckpt-5_temp").mkdir(parents=True)   # a killed save
    (tmp_path / "checkpoints" / "ckpt-5_temp" / "part-0").write_text("")
    take_lease(str(tmp_path), SINGLE).release()
    assert sorted(os.listdir(tmp_path)) == ["checkpoints"]
    assert os.listdir(tmp_path / "checkpoints") == []


def test_why_a_lease_may_be_taken_is_data_and_only_news_is_said(tmp_path, monkeypatch, caplog):
    me = claimant()
    here = {"host": me["host"], "pid_start": "1", "age": 0.0, "job": None}
    cases = {
        Why.SAME_JOB: {**here, "pid": 1, "job": "job-7"},
        Why.THIS_PROCESS: {**here, "pid": me["pid"]},
        Why.PROCESS_GONE: {**here, "pid": 2 ** 22 + 1},
        Why.SILENT: {"host": "elsewhere", "pid": 1, "age": 61.0},
    }
    monkeypatch.setattr("tfyard.train.rundir.lease.jobid.current", lambda: "job-7")
    me = claimant()
    for why, holder in cases.items():
        stale = stale_reason(holder, me)
        assert stale.why is why and stale.said == (why in (Why.PROCESS_GONE, Why.SILENT))
    assert str(stale_reason(cases[Why.PROCESS_GONE], me)) == f"its process {2 ** 22 + 1} is gone"
    assert str(stale_reason(cases[Why.SILENT], me)) == "not renewed for 61s"
    assert stale_reason({"host": "elsewhere", "pid": 1, "age": 1.0}, me) is None
    held(tmp_path, host=me["host"], pid=2 ** 22 + 1)   # a killed run: its take-over is said
    with caplog.at_level("INFO", logger="tfyard"):
        take_lease(str(tmp_path), SINGLE).release()
    assert [r.message for r in caplog.records] == [
        f"tfyard: took over the lease on {tmp_path} (its process {2 ** 22 + 1} is gone)"]


def test_a_holder_killed_a_moment_ago_is_taken_over_at_once(tmp_path, caplog):
    """Issue 67: a rerun right after SIGKILL found its predecessor's pid still there (a
    zombie, or being torn down) and refused; a live holder is still refused."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from tfyard.distribute.cluster import parse_tf_config\n"
        "from tfyard.train.rundir.lease import take_lease\n"
        f"with take_lease({str(tmp_path)!r}, parse_tf_config(None)):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(UserError, match=rf"in use by another run \(host .*, pid "
                                            rf"{holder.pid},"):
            take_lease(str(tmp_path), SINGLE)
        holder.kill()   # and not reaped: a zombie, as under `timeout -s KILL`
        asked = time.monotonic()
        with caplog.at_level("INFO", logger="tfyard"):
            take_lease(str(tmp_path), SINGLE).release()
        assert time.monotonic() - asked < ENDING_S
        assert caplog.messages == [
            f"tfyard: took over the lease on {tmp_path} (its process {holder.pid} is gone)"]
    finally:
        holder.kill()
        holder.wait()
