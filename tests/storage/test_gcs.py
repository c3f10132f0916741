"""gs:// on a real GCS JSON-API server (gcp-storage-emulator on 127.0.0.1): the same copies,
uploads and lease as s3://, through google-cloud-storage. Data, fine-tuning sources, runs to
read and predict's inputs and outputs all take gs://, and each fault is one line. A set ten
times the data cache streams from gs:// as from s3:// (test_s3_stream.py): the same examples
as from local disk, within the limit, and SIGKILLed mid-run, then resumed with the cache
deleted, it ends with the unbroken local run's weights (two members sharing a work dir on
gs://: test_s3_cache.py).

The emulator ignores generation preconditions (ifGenerationMatch), so it cannot hold a run's
lease: there a run is refused in one line, which is what a store without conditional writes
must get. The lease itself is one code path for both stores (`lease_places.InBucket` over
`Store.put`'s conditions); its refusals and take-overs are tested against moto's S3 server,
which honours its conditions, in test_s3_runs.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.data.helpers import speckled, write_imagenet
from tests.storage.conftest import (
    free_port,
    gcs_upload,
    refused,
    refuses_bad_data_urls,
    train_on,
    two_files,
)
from tests.storage.test_s3_stream import SHARDS, ids, killed_once, train
from tests.train.test_evaluate_splits import WRITERS
from tfyard.cli import main
from tfyard.errors import UserError
from tfyard.runfiles.layout import RunDirectory
from tfyard.storage import location, readable_dir, stores

STEPS = 21   # saves at 7 and 14: time to SIGKILL the streamed run mid-way


def objects(client, bucket: str, prefix: str) -> dict[str, bytes]:
    return {blob.name[len(prefix) + 1:]: blob.download_as_bytes()
            for blob in client.list_blobs(bucket, prefix=prefix + "/")}


def test_a_gcs_store_copies_writes_and_refuses_a_run_it_cannot_guard(gcs, tmp_path):
    from tfyard.train.rundir.lease import take_bucket_lease

    gcs_upload(gcs, two_files(tmp_path / "source"), "copies", "set")
    local = readable_dir("gs://copies/set", str(tmp_path / "work"))
    assert local == str(tmp_path / "work" / "bucket-data" / "gs" / "copies" / "set")
    assert open(os.path.join(local, "nested", "b.bin"), "rb").read() == b"b" * 10
    gcs.bucket("copies").blob("set/a.bin").upload_from_string(b"new")
    gcs.bucket("copies").blob("set/nested/b.bin").delete()
    readable_dir("gs://copies/set", str(tmp_path / "work"))   # kept equal to the prefix
    assert open(os.path.join(local, "a.bin"), "rb").read() == b"new"
    assert not os.path.exists(os.path.join(local, "nested", "b.bin"))

    objects_ = stores.of("gs")
    place = location("gs://copies/set/lease", "--x")
    version = objects_.put(place, b"one", "--x", if_absent=True)
    found = objects_.head(place, "--x")
    assert found.version == version and 0 <= found.age < 60
    assert objects_.read(place, "--x") == b"one"
    objects_.delete(place, "--x")
    assert objects_.head(place, "--x") is None and objects_.read(place, "--x") is None
    objects_.delete(place, "--x")   # nothing there: no error

    with pytest.raises(UserError, match=r"^--output_dir gs://copies/run: the store http://"
                       r"127\.0\.0\.1:\d+ ignores generation preconditions \(ifGenerationMatch"
                       r"\), so tfyard cannot keep a second run out of this prefix"):
        take_bucket_lease("gs://copies/run")
    assert objects(gcs, "copies", "run") == {}   # its trial lease removed


def test_data_weights_a_run_and_predict_take_gs(gcs, tmp_path, run, folder, capsys):
    data = tmp_path / "data"
    data.mkdir()
    WRITERS["cifar10"](data)
    gcs_upload(gcs, data, "team", "cifar")
    gcs_upload(gcs, run, "team", "runs/photos")   # a run made elsewhere, then uploaded
    out = tmp_path / "out"
    assert main(["train", "--dataset", "cifar10", "--data_dir", "gs://team/cifar", "--model",
                 "cifar_resnet8", "--image_size", "16", "--batch_size", "4", "--train_steps",
                 "2", "--num_gpus", "0", "--quiet", "--no_jit_compile", "--no_export",
                 "--output_dir", str(out), "--init_checkpoint", "gs://team/runs/photos"]) == 0
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["data_dir"] == "gs://team/cifar"
    assert recorded["init"]["source"] == "gs://team/runs/photos"
    assert recorded["init"]["loaded"] > 0
    capsys.readouterr()
    assert main(["evaluate", "--output_dir", "gs://team/runs/photos"]) == 0
    assert "top1" in capsys.readouterr().out
    assert main(["data", "inspect", "gs://team/cifar", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["splits"]["train"]["records"] == 10
    assert main(["data", "convert", "cifar10", "gs://team/cifar", "gs://team/set", "--shards",
                 "2", "--workers", "1"]) == 0
    assert {"labels.txt", "train-00000-of-00002", "train-00001-of-00002"} <= set(
        objects(gcs, "team", "set"))

    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "red.jpg").write_bytes((folder / "validation" / "red" / "0.jpg").read_bytes())
    gcs_upload(gcs, photos, "team", "photos")
    capsys.readouterr()
    assert main(["predict", "--output_dir", "gs://team/runs/photos", "gs://team/photos",
                 "--output", "gs://team/scored/rows.jsonl"]) == 0
    assert capsys.readouterr().err.strip().endswith("wrote gs://team/scored/rows.jsonl")
    (row,) = [json.loads(line) for line in objects(gcs, "team", "scored")["rows.jsonl"]
              .splitlines()]
    assert row["path"] == "gs://team/photos/red.jpg" and not row["error"]
    import tfyard

    (local,) = tfyard.predict(run, [str(photos / "red.jpg")])
    assert row["class_name"] == local["class_name"] and row["top_ids"] == local["top_ids"]

    assert main(["train", "--dataset", "digits", "--num_gpus", "0", "--output_dir",
                 "gs://team/runs/new"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "ignores generation preconditions" in err, err


def test_each_gcs_fault_is_one_line_in_seconds(gcs, tmp_path, capsys, monkeypatch):
    gcs_upload(gcs, tmp_path, "faults", "nothing")   # the bucket, holding no data
    out = str(tmp_path / "out")

    def train(url):
        return train_on(url, out)

    refuses_bad_data_urls("gs", "Not!A!Bucket", out, capsys)
    assert "no such bucket" in refused(["train", "--dataset", "digits", "--num_gpus", "0",
                                         "--output_dir", "gs://no-bucket-here/run"], capsys)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    line = refused(train("gs://faults/cifar"), capsys)
    assert "cannot reach the GCS endpoint" in line and "3 tries" in line
    assert time.monotonic() - started < 15   # a refusing endpoint: 3 tries, not a 45 s deadline
    assert not os.path.exists(out)

    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("GOOGLE_", "CLOUDSDK_", "STORAGE_EMULATOR_HOST"))}
    env.update(NO_GCE_CHECK="true", CLOUDSDK_CONFIG=str(tmp_path / "no-gcloud"))
    done = subprocess.run([sys.executable, "-m", "tfyard", "data", "inspect", "gs://faults/x"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "tfyard: error: PATH gs://faults/x: no Google credentials found; set "
        "GOOGLE_APPLICATION_CREDENTIALS to a key file, or run gcloud auth "
        "application-default login")


def test_a_set_six_times_the_cache_streams_from_gs_as_from_disk(gcs, tmp_path):
    data = tmp_path / "data"
    write_imagenet(data, {"train": [[1, 2]] * SHARDS, "validation": [[1, 2]] * 2},
                   pixels=speckled)
    gcs_upload(gcs, data, "streamed", "imagenet")
    sizes = [path.stat().st_size for path in data.iterdir()]
    limit = sum(sizes) // 6   # one training shard and evaluation's two fit

    def digest(out) -> str:
        return json.loads(Path(RunDirectory(str(out)).summary).read_text())["weights_digest"]

    # --skip_corrupt: its count of unusable records scans the split through the cache too
    assert main(train(str(data), tmp_path / "here", tmp_path / "here-work", "--skip_corrupt",
                      steps=STEPS)) == 0
    here = ids(tmp_path / "here-work")

    # SIGKILLed once a save is on disk, then resumed with the cache deleted (a new work dir)
    out, work, new_node = tmp_path / "there", tmp_path / "work", tmp_path / "new-node"
    argv = train("gs://streamed/imagenet", out, work, "--data_cache_limit", str(limit),
                 "--skip_corrupt", steps=STEPS)
    killed_once(argv, (out / "checkpoints" / "checkpoint").exists)
    before = ids(work)
    assert before and all(before[step] == here[step] for step in before)
    argv[argv.index("--work_dir") + 1] = str(new_node)
    assert main(argv) == 0
    summary = json.loads(Path(RunDirectory(str(out)).summary).read_text())
    assert 0 < summary["resumed_from_step"] < STEPS and summary["skipped_records"] == 0
    assert summary["weights_digest"] == digest(tmp_path / "here")   # bit for bit
    after = ids(new_node)
    assert sorted(after) == list(range(summary["resumed_from_step"], STEPS))
    assert all(after[step] == here[step] for step in after)
    assert not (new_node / "bucket-data").exists() and (new_node / "bucket-stream").is_dir()
    cache = summary["data_cache"][0]
    assert cache["url"] == "gs://streamed/imagenet" and cache["fetched"] > limit, cache
    assert cache["high_water"] <= limit, cache
