"""A run in an S3 bucket, on a real S3-protocol server: written to a local copy and uploaded in
the background with the promises of a run on disk. One writer (a second is refused in one
line), SIGTERM's save reaches the bucket before exit, a checkpoint is in the bucket whole or
not at all (a run SIGKILLed while the store stalls resumes from the last whole one), a store
that goes down stops the run in one line and loses nothing (the rerun publishes the steps
trained meanwhile instead of taking the bucket's older files), and a restart on a new node
(nothing on its disk) resumes from the bucket alone: every broken run ends bit for bit where
an unbroken local run of the same flags ends. Evaluate, plot and predict read it there."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import run_here
from tests.reliability.conftest import latest_checkpoint_step, wait_for
from tests.storage.conftest import SECRET
from tests.storage.proxy import StoreProxy
from tests.train.conftest import FAST, read_json
from tfyard.cli import main

STEPS = ["--train_steps", "60", "--checkpoint_every_steps", "5"]
LOUD = [flag for flag in FAST if flag != "--quiet"]   # the lines a user reads


def bucket(client, name: str) -> str:
    client.create_bucket(Bucket=name)
    return name


def objects(client, name: str, prefix: str) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket=name, Prefix=prefix + "/").get("Contents", [])
    return {item["Key"][len(prefix) + 1:]: client.get_object(Bucket=name, Key=item["Key"])[
        "Body"].read() for item in listed}


def bucket_step(client, name: str, prefix: str) -> int:
    """The step of the checkpoint the bucket's pointer names (0: none), after checking
    that every file of each checkpoint it lists is there (the pointer read first: a store
    holds a checkpoint's files before the pointer naming it)."""
    try:
        pointer = client.get_object(Bucket=name, Key=f"{prefix}/checkpoints/checkpoint")[
            "Body"].read().decode()
    except client.exceptions.NoSuchKey:
        return 0
    listed = [line.split('"')[1] for line in pointer.splitlines() if "_path" in line]
    keys = {item["Key"] for item in client.list_objects_v2(
        Bucket=name, Prefix=f"{prefix}/checkpoints/").get("Contents", [])}
    newest = listed[0]
    assert {f"{prefix}/checkpoints/{newest}.index", f"{prefix}/checkpoints/{newest}.meta.json",
            f"{prefix}/checkpoints/{newest}.data-00000-of-00001"} <= keys, newest
    return int(newest.split("-")[1])


def copy_of(work: Path, name: str, prefix: str) -> Path:
    return work / "bucket-runs" / "s3" / name / prefix


def work_dir(tmp_path: Path, digits_work: Path, name: str = "work") -> Path:
    """A work dir of its own (a node's disk) sharing the digits records."""
    work = tmp_path / name
    work.mkdir()
    for entry in ("digits", "tfrecord_counts.json"):
        os.symlink(digits_work / entry, work / entry)
    return work


def start(url: str, work: Path, env: dict, *flags) -> subprocess.Popen:
    command = [sys.executable, "-m", "tfyard", "train", *LOUD, *STEPS, "--output_dir", url,
               "--work_dir", work, *flags]
    return subprocess.Popen(list(map(str, command)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **env})


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=300)
    assert SECRET not in out
    return proc.returncode, out


def here(capsys, url: str, work: Path, *flags) -> tuple[int, str]:
    """`start`'s run in this process (where no signal is the point): its status, and what
    it said."""
    done = run_here(capsys, "train", *LOUD, *STEPS, "--output_dir", url, "--work_dir", work,
                    *flags)
    said = done.stdout + done.stderr
    assert SECRET not in said
    return done.returncode, said


def once(condition, then) -> None:
    """`then()` as soon as `condition()` holds, from a thread of its own (while this one
    trains); given up after five minutes."""
    def watch():
        deadline = time.monotonic() + 300
        while not condition():
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        then()

    threading.Thread(target=watch, daemon=True).start()


def test_the_bucket_lease_is_one_writer_through_conditional_writes(s3, monkeypatch):
    from tfyard.errors import UserError
    from tfyard.train.rundir.lease import take_bucket_lease

    bucket(s3, "leases")
    url = "s3://leases/run"
    lease = take_bucket_lease(url)
    held = json.loads(objects(s3, "leases", "run")[".tfyard-lease"])
    assert held["token"] == lease.me["token"] and held["pid"] == os.getpid()
    lease.release()
    assert objects(s3, "leases", "run") == {}

    other = {"host": "another-host", "pid": 1, "started": 0, "token": "theirs"}
    s3.put_object(Bucket="leases", Key="run/.tfyard-lease", Body=json.dumps(other))
    with pytest.raises(UserError, match=r"^s3://leases/run is in use by another run \(host "
                                        r"another-host, pid 1"):
        take_bucket_lease(url)
    monkeypatch.setenv("TFYARD_LEASE_TIMEOUT", "-1")   # not renewed in time: stale
    lease = take_bucket_lease(url)
    assert json.loads(objects(s3, "leases", "run")[".tfyard-lease"])["token"] == lease.me["token"]
    s3.put_object(Bucket="leases", Key="run/.tfyard-lease", Body=json.dumps(other))
    lease.release()   # no longer ours: left to its holder
    assert json.loads(objects(s3, "leases", "run")[".tfyard-lease"])["token"] == "theirs"


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory, digits_work):
    """The summary of the same flags trained on local disk, unbroken (in this process: the
    runs it is compared with are fresh ones)."""
    out = tmp_path_factory.mktemp("unbroken")
    assert main(["train", *FAST, *STEPS, "--output_dir", str(out), "--work_dir",
                 str(digits_work), "--no_export"]) == 0   # the export leaves the weights
    return read_json(out / "summary.json")


@pytest.mark.slow
def test_one_writer_sigterm_and_a_new_node_then_evaluate_plot_and_predict_there(
        s3, tmp_path, digits_work, unbroken, capsys):
    name = bucket(s3, "runs")
    url = "s3://runs/team/a"
    work = work_dir(tmp_path, digits_work)
    copy = copy_of(work, name, "team/a")
    first = start(url, work, {}, "--no_export")
    wait_for(lambda: (copy / "metrics.jsonl").exists(), first)
    second = subprocess.run([sys.executable, "-m", "tfyard", "train", *FAST, *STEPS,
                             "--output_dir", url, "--work_dir", work_dir(tmp_path, digits_work,
                                                                         "other")],
                            capture_output=True, text=True)
    assert second.returncode == 2
    assert second.stderr.strip().startswith(f"tfyard: error: {url} is in use by another run")
    assert second.stderr.count("\n") == 1

    first.send_signal(signal.SIGTERM)
    code, out = finish(first)
    assert code == 143, out
    assert out.strip().splitlines()[-1] == f"tfyard: the run is in {url} (uploaded from {copy})"
    saved = int(out.split("saved checkpoint ckpt-")[1].split(";")[0])
    assert bucket_step(s3, name, "team/a") == saved   # in the bucket before the exit
    assert ".tfyard-lease" not in objects(s3, name, "team/a")

    shutil.rmtree(work)   # a new node (this process): nothing of the first one's disk
    work = work_dir(tmp_path, digits_work)
    code, out = here(capsys, url, work)
    assert code == 0, out
    assert out.strip().splitlines()[-1] == (f"tfyard: the run is in {url} (uploaded from "
                                            f"{copy})")
    stored = objects(s3, name, "team/a")
    summary = json.loads(stored["summary.json"])
    assert summary["resumed_from_step"] == saved and summary["final_step"] == 60
    assert summary["weights_digest"] == unbroken["weights_digest"]
    run = json.loads(stored["run.json"])
    assert run["output_dir"] == url and run["output_copy"] == str(copy)
    assert {"metrics.jsonl", "export/model.keras", "export/saved_model/saved_model.pb"} <= \
        set(stored) and any(key.startswith("logs/train/events.out") for key in stored)

    capsys.readouterr()
    assert main(["evaluate", "--output_dir", url]) == 0
    assert json.loads(capsys.readouterr().out)["top1"] == pytest.approx(
        summary["eval"]["top1"], abs=1e-6)
    assert main(["plot", "--output_dir", url]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {url}/curves.png") and "tensorboard --logdir" in said
    assert objects(s3, name, "team/a")["curves.png"].startswith(b"\x89PNG")
    logs = Path(said.split("--logdir ")[1].strip())
    assert sorted(p.name for p in logs.iterdir()) == ["eval", "train"]
    image = tmp_path / "seven.png"
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits

    digit = load_digits().images[7].astype(np.uint8)[..., None] * 16
    image.write_bytes(tf.io.encode_png(digit).numpy())
    assert main(["predict", "--output_dir", url, str(image), "--format", "jsonl"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["path"] == str(image) and len(row["top_scores"]) == 5
    s3.upload_file(str(image), name, "photos/day-1/seven.png")   # from a bucket, into one
    assert main(["predict", "--output_dir", url, "s3://runs/photos", "--output",
                 "s3://runs/scored/rows.jsonl"]) == 0
    assert capsys.readouterr().err.strip().endswith("wrote s3://runs/scored/rows.jsonl")
    (there,) = [json.loads(line) for line in objects(s3, name, "scored")["rows.jsonl"].splitlines()]
    assert there["path"] == "s3://runs/photos/day-1/seven.png"
    assert there["top_ids"] == row["top_ids"] and there["top_scores"] == row["top_scores"]
    import tfyard

    (python,) = tfyard.predict(url, "s3://runs/photos")   # the Python form reads the bucket too
    assert python["path"] == there["path"] and python["top_ids"] == row["top_ids"]


@pytest.mark.slow
def test_a_kill_while_the_store_stalls_and_a_store_that_goes_down_lose_nothing(
        s3, s3_endpoint, tmp_path, digits_work, unbroken, capsys, monkeypatch):
    """The killed run is a fresh process (SIGKILL); the new node's runs are this one."""
    name = bucket(s3, "stalls")
    url = "s3://stalls/b"
    proxy = StoreProxy(s3_endpoint)
    through = {"AWS_ENDPOINT_URL_S3": proxy.url}
    try:
        work = work_dir(tmp_path, digits_work)
        copy = copy_of(work, name, "b")
        run = start(url, work, through, "--no_export")
        wait_for(lambda: bucket_step(s3, name, "b") >= 5, run)
        proxy.hold()   # the store stalls: training goes on, uploads wait
        uploaded = bucket_step(s3, name, "b")
        wait_for(lambda: latest_checkpoint_step(copy) >= uploaded + 10, run)
        run.kill()   # SIGKILL, uploads in flight
        finish(run)
        proxy.release()
        resumed = bucket_step(s3, name, "b")   # where the new node starts
        assert resumed in (uploaded, uploaded + 5)   # whole, or not there

        shutil.rmtree(work)   # a new node; the store goes down once the run has its copy
        work = work_dir(tmp_path, digits_work)
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
        monkeypatch.setenv("TFYARD_STORE_TIMEOUT", "4")
        once(lambda: (copy / ".tfyard-lease").exists(), proxy.stop)
        code, out = here(capsys, url, work, "--no_export")
        assert code == 2, out
        error = out.strip().splitlines()[-1]
        assert error.startswith(f"tfyard: error: --output_dir {url}: the store "), error
        assert f"the run's latest files are kept in {copy}: rerun the same command" in error
        kept = latest_checkpoint_step(copy)
        assert kept > bucket_step(s3, name, "b")

        proxy.release()   # back: the same command uploads what this node kept, and resumes
        monkeypatch.delenv("TFYARD_STORE_TIMEOUT")
        code, out = here(capsys, url, work, "--no_export")
        assert code == 0, out
        assert f"uploading ckpt-{kept}" in out
    finally:
        proxy.close()
    stored = objects(s3, name, "b")
    summary = json.loads(stored["summary.json"])
    assert summary["resumed_from_step"] == kept
    assert summary["weights_digest"] == unbroken["weights_digest"]
    # the steps trained while the store was down are in both, each step's report once
    assert stored["metrics.jsonl"] == (copy / "metrics.jsonl").read_bytes()
    reports = [json.loads(line) for line in stored["metrics.jsonl"].splitlines()]
    steps = [r["step"] for r in reports if r["kind"] == "train"]   # a chunk: 5 steps or less
    # the first node's reports the bucket had not taken yet went with its disk; from where
    # the new node started, every chunk's report is there
    assert steps == sorted(set(steps)) and steps[-1] == 60
    after = [step for step in steps if step > resumed]
    assert after and after[0] <= resumed + 5, steps
    assert max(b - a for a, b in itertools.pairwise(after)) <= 5, steps
    events = {str(p.relative_to(copy)): p.read_bytes() for p in copy.rglob("*tfevents*")}
    assert len([n for n in events if n.startswith("logs/train/")]) >= 2   # each start's
    assert all(stored[key] == data for key, data in events.items())
