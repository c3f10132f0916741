"""A TFRecord set in a bucket six times the data cache trains through it, on a real S3
server: the disk it takes, the files open included, stays within the limit, and it reads
exactly the examples, in exactly the order, a run from local disk reads; SIGKILLed mid-run
and resumed on a new node with an empty cache it ends with the unbroken local run's weights,
bit for bit, and it is evaluated through the cache; each report in metrics.jsonl carries the
high-water mark; `bench data` reads it the same way; a limit that cannot hold the files read
at once (a training shard and the evaluation shards) is one line before any download. An
image folder ten times the cache reads through it alike."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.data.helpers import speckled, write_folder, write_imagenet
from tests.reliability.conftest import wait_for
from tests.storage.conftest import refused, upload
from tfyard.cli import main
from tfyard.runfiles.layout import RunDirectory, WorkDirectory
from tfyard.storage import run_copy

SHARDS = 20   # 2 records each: an epoch is 10 steps of 4
STEPS = 40   # 4 epochs: time to SIGKILL the bucket run mid-way


def train(data: str, out, work, *flags, steps: int = STEPS) -> list[str]:
    """`steps` steps of a tiny model, saving every 7 (mid-epoch), its example ids recorded."""
    return ["train", "--dataset", "imagenet", "--data_dir", data, "--model", "cifar_resnet8",
            "--image_size", "16", "--batch_size", "4", "--train_steps", str(steps),
            "--steps_per_loop", "1", "--checkpoint_every_steps", "7", "--seed", "7",
            "--record_example_ids", "--num_gpus", "0", "--quiet", "--no_jit_compile",
            "--no_export", "--output_dir", str(out), "--work_dir", str(work), *flags]


def ids(work) -> dict[int, str]:
    """Step -> the example ids it read, the last record of a step winning (a step run again
    after a resume reads the same ones)."""
    with open(WorkDirectory(str(work)).member_example_ids("single"), encoding="utf-8") as lines:
        return {record["step"]: json.dumps(record["ids"])
                for record in map(json.loads, lines)}


def killed_once(argv: list[str], saved) -> None:
    """Run `tfyard` `argv` in a fresh process and SIGKILL it once `saved()` (its first save
    is where a resume finds it), before the run ends."""
    run = subprocess.Popen([sys.executable, "-m", "tfyard", *argv], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(saved, run)
        os.kill(run.pid, signal.SIGKILL)
    finally:
        run.kill()
        run.communicate()
    assert run.returncode == -signal.SIGKILL


def test_a_set_six_times_the_cache_reads_as_from_disk(s3, tmp_path, capsys, monkeypatch):
    data = tmp_path / "data"
    write_imagenet(data, {"train": [[1, 2]] * SHARDS, "validation": [[1, 2]] * 2},
                   pixels=speckled)
    upload(s3, data, "big", "imagenet")
    sizes = {path.name: path.stat().st_size for path in data.iterdir()}
    # one training shard and the two evaluation shards are open at once while it evaluates
    need = max(size for name, size in sizes.items() if name.startswith("train-")) + sum(
        size for name, size in sizes.items() if name.startswith("validation-"))
    limit = sum(sizes.values()) // 6
    assert need <= limit < 5 * max(sizes.values())

    line = refused(train("s3://big/imagenet", tmp_path / "refused", tmp_path / "refused-work",
                         "--data_cache_limit", str(need - 1)), capsys)
    assert "is too small for the shards of s3://big/imagenet: one training shard and 2 " \
           "evaluation shards read at once take" in line and line.endswith(" or more"), line
    assert not (tmp_path / "refused-work" / "bucket-stream").exists()

    assert main(train(str(data), tmp_path / "here", tmp_path / "here-work")) == 0
    here = ids(tmp_path / "here-work")
    with open(RunDirectory(str(tmp_path / "here")).summary, encoding="utf-8") as stream:
        unbroken = json.load(stream)["weights_digest"]

    # SIGKILLed once a save is in the bucket, then resumed on a new node: an empty cache,
    # the limit from the environment
    url, work = "s3://big/runs/there", tmp_path / "work"
    killed_once(train("s3://big/imagenet", url, work, "--data_cache_limit", str(limit)),
                lambda: s3.list_objects_v2(Bucket="big", Prefix="runs/there/checkpoints/"
                                           "checkpoint")["KeyCount"])
    before = ids(work)
    assert before and all(before[step] == here[step] for step in before)
    monkeypatch.setenv("TFYARD_DATA_CACHE_LIMIT", str(limit))
    new_node = tmp_path / "new-node"
    assert main(train("s3://big/imagenet", url, new_node)) == 0
    assert not (new_node / "bucket-data").exists() and (new_node / "bucket-stream").is_dir()
    copy = RunDirectory(run_copy(url, str(new_node)))
    with open(copy.summary, encoding="utf-8") as stream:
        summary = json.load(stream)
    assert 0 < summary["resumed_from_step"] < STEPS
    assert summary["weights_digest"] == unbroken   # bit for bit
    after = ids(new_node)
    assert sorted(after) == list(range(summary["resumed_from_step"], STEPS))
    assert all(after[step] == here[step] for step in after)
    cache = summary["data_cache"][0]
    assert cache["limit"] == limit and cache["fetched"] > 2 * limit   # read in pieces
    assert cache["high_water"] <= limit, cache   # the files open included
    assert 0 < cache["open_high"] <= need, cache   # one training shard, evaluation's two
    with open(copy.metrics, encoding="utf-8") as lines:
        reports = [json.loads(line) for line in lines]
    trained = [report for report in reports
               if report["kind"] == "train" and report["step"] > summary["resumed_from_step"]]
    marks = [report["data_cache_high_water"] for report in trained]
    assert marks and 0 < marks[0] <= marks[-1] <= cache["high_water"], marks   # as it went
    # the seconds the cache kept training waiting so far, beside the loop's input wait
    waits = [report["data_cache_wait"] for report in trained]
    assert waits == sorted(waits) and waits[-1] <= cache["wait_sec"], waits
    assert all(0 <= report["input_wait"] <= 1 for report in trained)
    with open(copy.run_file, encoding="utf-8") as stream:
        assert json.load(stream)["data_cache_limit"] == limit
    capsys.readouterr()
    assert main(["evaluate", "--output_dir", url]) == 0   # the bucket's run, the same path
    assert "top1" in capsys.readouterr().out
    assert main(["bench", "data", "--dataset", "imagenet", "--data_dir", "s3://big/imagenet",
                 "--batch_size", "4", "--image_size", "16", "--windows", "1",
                 "--window_batches", "2", "--warmup_batches", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["data"] == "s3://big/imagenet"   # JSON alone
    cache = tmp_path / "cache" / "tfyard"   # the default work dir (the s3 fixture's)
    # evaluate and bench streamed the set too; the run evaluated was copied (bucket-data)
    assert (cache / "bucket-stream" / "s3" / "big" / "imagenet").is_dir()
    assert not (cache / "bucket-data" / "s3" / "big" / "imagenet").exists()


def test_an_image_folder_ten_times_the_cache_reads_as_from_disk(s3, tmp_path):
    data = tmp_path / "photos"
    write_folder(data, {"cat": 12, "dog": 12, "owl": 12})
    upload(s3, data, "photos", "set")
    sizes = [path.stat().st_size for path in data.rglob("*.jpg")]
    limit = sum(sizes) // 10

    def run(where: str, name: str) -> dict[int, str]:
        argv = train(where, tmp_path / name, tmp_path / f"{name}-work", "--dataset",
                     "imagefolder", "--data_cache_limit", str(limit), steps=12)
        assert main(argv) == 0
        return ids(tmp_path / f"{name}-work")

    here = run(str(data), "here")
    assert run("s3://photos/set", "there") == here and len(here) == 12   # 1.5 epochs
    assert not (tmp_path / "there-work" / "bucket-data").exists()
    with open(RunDirectory(str(tmp_path / "there")).summary, encoding="utf-8") as stream:
        cache = json.load(stream)["data_cache"][0]
    assert cache["fetched"] > 10 * limit, cache   # read in pieces, each image once an epoch
    assert cache["high_water"] <= limit, cache
