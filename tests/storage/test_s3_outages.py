"""A rerun after a store outage, at each stage, on the real S3-protocol server (no training:
the copy and the bucket are laid out as a stopped run leaves them). The copy that continues
the bucket's latest checkpoint wins and loses nothing (the store back with older files, or
back empty; the last files of a final flush that failed); a copy of another lineage is set
aside whole, never deleted; a new node copies the bucket; every report either side held
survives, a step run again keeping its latest report."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from tests.process import until
from tests.storage.proxy import StoreProxy
from tests.storage.test_s3_runs import bucket, bucket_step, objects
from tfyard.distribute.cluster import parse_tf_config
from tfyard.errors import UserError
from tfyard.platform import Platform
from tfyard.train.rundir import lease
from tfyard.train.rundir.bucket import Publisher, published, put_back
from tfyard.train.rundir.directory import checkpoint_paths
from tfyard.train.rundir.reconcile import reconciled

EVENTS = "logs/train/events.out.tfevents.1.host.1.v2"


def report(step: int, kind: str = "train", at: float | None = None) -> str:
    return json.dumps({"kind": kind, "step": step, "epoch": step / 100,
                       "time": at if at is not None else 1000.0 + step, "loss": 1.0}) + "\n"


def run_file(*starts: str) -> str:
    return json.dumps({"model": "cifar_resnet8", "dataset": "digits", "num_classes": 10,
                       "starts": list(starts)})


def checkpoint(step: int) -> dict[str, bytes]:
    return {f"checkpoints/ckpt-{step}.index": b"i" * step,
            f"checkpoints/ckpt-{step}.data-00000-of-00001": b"d" * step,
            f"checkpoints/ckpt-{step}.meta.json": b"{}",
            "checkpoints/checkpoint": f'model_checkpoint_path: "ckpt-{step}"\n'
                                      f'all_model_checkpoint_paths: "ckpt-{step}"\n'.encode()}


def stopped_at(step: int, *starts: str, reports: str = "", events: bytes = b"") -> dict:
    """A run's files as it leaves them at `step` (the bucket's, or a copy's)."""
    return {"run.json": run_file(*starts).encode(), "metrics.jsonl": reports.encode(),
            EVENTS: events, **checkpoint(step)}


def put(s3, name: str, prefix: str, files: dict[str, bytes]) -> None:
    for key, body in files.items():
        s3.put_object(Bucket=name, Key=f"{prefix}/{key}", Body=body)


def lay(copy: Path, files: dict[str, bytes]) -> None:
    """The copy's files, written after the bucket's (a copy's newer files are newer)."""
    later = time.time() + 5
    for key, body in files.items():
        (copy / key).parent.mkdir(parents=True, exist_ok=True)
        (copy / key).write_bytes(body)
        os.utime(copy / key, (later, later))


def held(copy: Path) -> dict[str, bytes]:
    return {str(path.relative_to(copy)): path.read_bytes()
            for path in copy.rglob("*") if path.is_file()}


TRAINED = "".join(report(step) for step in range(10, 601, 10))   # 60 reports to step 600
BEFORE = "".join(report(step) for step in range(10, 50, 10))     # the bucket's, to step 40


def test_a_copy_left_by_an_outage_wins_publishes_and_merges(s3, tmp_path):
    name = bucket(s3, "outage")
    # The bucket stopped at step 50; it also holds what the copy lacks: a report of a step
    # run twice (the copy's is later), an evaluation, a second events file, curves.png.
    put(s3, name, "x", {**stopped_at(50, "a", reports=BEFORE + report(30, at=5.0) + report(
        40, "eval"), events=b"0123"), "logs/eval/events.out.tfevents.2.host.2.v2": b"ev",
        "curves.png": b"png"})
    copy = tmp_path / "copy"
    lay(copy, {**stopped_at(600, "a", reports=TRAINED, events=b"0123456789"),
               "summary.json": b"{}"})
    names = reconciled("s3://outage/x", str(copy))

    merged = (copy / "metrics.jsonl").read_text().splitlines()
    assert len(merged) == 61 and report(40, "eval").strip() in merged      # nothing lost
    assert [line for line in merged if '"step": 30,' in line] == [report(30).strip()]
    stored = objects(s3, name, "x")
    assert held(copy) == {key: body for key, body in stored.items()
                          if not key.startswith("checkpoints/ckpt-50")}   # one with the bucket
    assert stored[EVENTS] == b"0123456789" and bucket_step(s3, name, "x") == 600
    assert (copy / "curves.png").read_bytes() == b"png" and set(stored) == names


def test_the_copys_export_is_kept_whole(s3, tmp_path):
    name = bucket(s3, "export")
    put(s3, name, "x", {**stopped_at(50, "a"), "export/model.h5": b"old"})
    copy = tmp_path / "copy"
    lay(copy, {**stopped_at(600, "a"), "export/model.keras": b"new"})
    reconciled("s3://export/x", str(copy))
    assert sorted(p.name for p in (copy / "export").iterdir()) == ["model.keras"]


def test_a_store_back_empty_takes_the_whole_copy(s3, tmp_path):
    name = bucket(s3, "empty")
    copy = tmp_path / "copy"
    lay(copy, stopped_at(600, "a", reports=TRAINED, events=b"0123"))
    kept = held(copy)
    reconciled("s3://empty/x", str(copy))
    assert held(copy) == kept == objects(s3, name, "x")


def test_the_last_files_of_a_failed_final_flush_go_up_on_the_rerun(
        s3, s3_endpoint, tmp_path, monkeypatch):
    name = bucket(s3, "flush")
    put(s3, name, "x", stopped_at(50, "a", reports=BEFORE, events=b"0123"))
    copy, url = tmp_path / "copy", "s3://flush/x"
    proxy = StoreProxy(s3_endpoint)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url)
        monkeypatch.setenv("TFYARD_STORE_TIMEOUT", "2")
        publisher = Publisher(url, str(copy), reconciled(url, str(copy)))
        lay(copy, {**stopped_at(600, "a", reports=TRAINED, events=b"0123456789"),
                   "summary.json": b"{}"})
        proxy.stop()   # down as the run ends: its last files stay in the copy
        with pytest.raises(UserError, match=f"latest files are kept in {copy}: rerun"):
            publisher.close()
        proxy.release()
        reconciled(url, str(copy))
    finally:
        proxy.close()
    stored = objects(s3, name, "x")
    assert stored["summary.json"] == b"{}" and stored["metrics.jsonl"] == TRAINED.encode()
    assert stored[EVENTS] == b"0123456789" and bucket_step(s3, name, "x") == 600


def save(copy: Path, step: int, *before: int) -> str:
    """A save at `step` in the copy, its pointer listing the saves `before` kept and it."""
    lay(copy, {key: body for key, body in checkpoint(step).items() if "ckpt" in key})
    kept = [*before, step]
    (copy / "checkpoints" / "checkpoint").write_text("".join(
        [f'model_checkpoint_path: "ckpt-{step}"\n',
         *(f'all_model_checkpoint_paths: "ckpt-{n}"\n' for n in kept),
         *(f"all_model_checkpoint_timestamps: {n}.5\n" for n in kept)]))
    return str(copy / "checkpoints" / f"ckpt-{step}")


def test_saves_go_up_one_a_period_and_the_pointer_names_whole_ones_only(s3, tmp_path):
    """A save made within a period of the last upload waits for the next round, and one
    made meanwhile replaces it: it never goes up, and the bucket's pointer leaves it out
    though the local one lists it. The close sends the last save at once."""
    name, url, copy = bucket(s3, "spaced"), "s3://spaced/x", tmp_path / "copy"
    publisher = Publisher(url, str(copy), reconciled(url, str(copy)))
    publisher.checkpoint_saved(save(copy, 1))
    assert until(lambda: bucket_step(s3, name, "x") == 1, 120)   # the first at once
    publisher.checkpoint_saved(save(copy, 2, 1))
    time.sleep(1.5)   # time enough for a round woken at once to have sent it
    assert bucket_step(s3, name, "x") == 1
    publisher.checkpoint_saved(save(copy, 3, 1, 2))
    publisher.close()
    stored = objects(s3, name, "x")
    assert not [key for key in stored if key.startswith("checkpoints/ckpt-2")]
    assert stored["checkpoints/checkpoint"].decode().splitlines() == [
        'model_checkpoint_path: "ckpt-3"', 'all_model_checkpoint_paths: "ckpt-1"',
        'all_model_checkpoint_paths: "ckpt-3"', "all_model_checkpoint_timestamps: 1.5",
        "all_model_checkpoint_timestamps: 3.5"]


@pytest.mark.parametrize("copy_step, starts", [(600, ("a",)), (40, ("a", "b"))])
def test_a_copy_of_another_lineage_is_set_aside_whole(s3, tmp_path, caplog, copy_step,
                                                      starts):
    """Another start resumed from the bucket and trained on (the copy lacks its start), or
    the copy is behind the bucket's checkpoint: the bucket's lineage wins."""
    name = bucket(s3, f"lineage-{copy_step}")
    theirs = stopped_at(300, "a", "b", "c", reports=BEFORE, events=b"01")
    put(s3, name, "x", theirs)
    copy = tmp_path / "copy"
    lay(copy, stopped_at(copy_step, *starts, reports=TRAINED, events=b"0123456789"))
    ours = held(copy)
    with caplog.at_level(logging.INFO, logger="tfyard"):
        reconciled(f"s3://{name}/x", str(copy))
    assert held(copy) == theirs == objects(s3, name, "x")
    (aside,) = [line.split(" as ")[1].split(";")[0] for line in caplog.messages
                if "set aside whole as" in line]
    assert Path(aside).parent == tmp_path and Path(aside).name.startswith("copy.set-aside-")
    assert held(Path(aside)) == ours


def test_a_new_node_copies_the_bucket(s3, tmp_path):
    name = bucket(s3, "node")
    theirs = stopped_at(50, "a", reports=BEFORE, events=b"01")
    put(s3, name, "x", theirs)
    reconciled("s3://node/x", str(tmp_path / "copy"))
    assert held(tmp_path / "copy") == theirs and list(tmp_path.iterdir()) == [tmp_path / "copy"]


def test_run_json_goes_back_under_the_runs_lease(s3, tmp_path):
    """`evaluate` and `track` put run.json back only when no run holds the prefix."""
    name = bucket(s3, "puts")
    copy = tmp_path / "copy"
    lay(copy, {"run.json": run_file("a").encode()})
    live = {"host": "another-host", "pid": 1, "started": 0, "token": "theirs"}
    s3.put_object(Bucket=name, Key="x/.tfyard-lease", Body=json.dumps(live))
    with pytest.raises(UserError, match=r"^s3://puts/x is in use by another run"):
        put_back(str(copy), "s3://puts/x", "run.json", leased=True)
    assert "run.json" not in objects(s3, name, "x")
    s3.delete_object(Bucket=name, Key="x/.tfyard-lease")   # the run ended
    put_back(str(copy), "s3://puts/x", "run.json", leased=True)
    assert objects(s3, name, "x") == {"run.json": run_file("a").encode()}   # lease released


def member(role: str, tmp_path: Path, url: str):
    """The platform and cluster of one member of a two-member job writing to `url`."""
    cluster = parse_tf_config({"cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"]},
                               "task": {"type": role, "index": 0}})
    where = tmp_path / role
    return Platform(None, str(where / "copy"), str(where / "work"), str(where / "logs"), 0,
                    output_url=url), cluster


def restored(copy: str) -> tuple[str, bytes]:
    """The checkpoint a member restores from its copy: its name and its data."""
    latest = checkpoint_paths(os.path.join(copy, "checkpoints"))[0]
    return os.path.basename(latest), Path(latest + ".data-00000-of-00001").read_bytes()


def test_a_member_restores_the_checkpoint_the_chief_reconciled(s3, tmp_path, monkeypatch):
    """A worker whose cluster has formed while the chief's copy (step 600, left by an outage)
    has not yet won over the bucket (step 50) restores what the chief restores: it reads the
    chief's token as it would from the cluster's coordination service (here once the chief
    has it) and answers only to that lease; a killed previous start's lease saying
    `reconciled` is no answer, so it never restores step 50."""
    name, url = bucket(s3, "members"), "s3://members/x"
    monkeypatch.setenv("TFYARD_JOB_ID", "job")   # a launcher's restart takes the lease over
    put(s3, name, "x", {**stopped_at(50, "a"), ".tfyard-lease": json.dumps(
        {"host": "gone", "pid": 1, "job": "job", "token": "killed", "reconciled": True}).encode()})
    chief_plat, chief = member("chief", tmp_path, url)
    lay(Path(chief_plat.output_dir), stopped_at(600, "a"))
    worker_plat, worker = member("worker", tmp_path, url)
    token, got = {}, {}
    shared = threading.Event()

    def start_worker() -> None:
        with published(worker_plat, worker, 300) as run:
            got["worker"] = restored(run.joined(
                lambda _: shared.wait(300) and token["chief"]).output_dir)

    thread = threading.Thread(target=start_worker)
    thread.start()
    with published(chief_plat, chief, 300) as run:
        plat = run.joined(lambda mine: token.setdefault("chief", mine))
        shared.set()
        thread.join(300)
        got["chief"] = restored(plat.output_dir)
    assert got["worker"] == got["chief"] == ("ckpt-600", b"d" * 600)


def test_a_member_answers_only_to_the_lease_of_its_own_starts_chief(s3, monkeypatch):
    """A replaced pod: the old chief still runs (its lease renewed, `reconciled`) while the
    members of the new start wait for the chief they formed their cluster with."""
    name, url = bucket(s3, "starts"), "s3://starts/x"
    renewing, renewed = threading.Event(), threading.Event()

    def old_chief() -> None:
        while not renewing.is_set():
            s3.put_object(Bucket=name, Key="x/.tfyard-lease", Body=json.dumps(
                {"host": "old-pod", "pid": 1, "token": "old-start", "reconciled": True,
                 "written": time.time()}))
            renewed.set()
            renewing.wait(0.2)

    thread = threading.Thread(target=old_chief)
    thread.start()
    try:
        assert renewed.wait(30)
        with pytest.raises(UserError, match=r"the chief did not make its copy one with the "
                           r"bucket within 2s"):
            lease.wait_reconciled(url, "new-start", 2)
    finally:
        renewing.set()
        thread.join(30)
    s3.put_object(Bucket=name, Key="x/.tfyard-lease", Body=json.dumps(
        {"host": "new-pod", "pid": 1, "token": "new-start", "reconciled": True}))
    lease.wait_reconciled(url, "new-start", 30)   # its own start's chief: at once


def test_a_member_without_a_live_chief_stops_in_one_line(s3, tmp_path, monkeypatch):
    name, url = bucket(s3, "nochief"), "s3://nochief/x"
    put(s3, name, "x", {**stopped_at(50, "a"), ".tfyard-lease": json.dumps(
        {"host": "gone", "pid": 1, "token": "killed", "reconciled": True}).encode()})
    worker_plat, worker = member("worker", tmp_path, url)
    with pytest.raises(UserError, match=r"^--output_dir s3://nochief/x: the chief did not make "
                       r"its copy one with the bucket within 1s.*raise --startup_timeout$"):
        with published(worker_plat, worker, 1) as run:
            run.joined(lambda _: "a-start-whose-chief-never-came")
