"""A TFRecord set in a bucket ten times the data cache trains through it, on a real S3
server: the disk it takes stays under the limit plus the files open at once, and it reads
exactly the examples, in exactly the order, a run from local disk reads, also resumed on a
new node with an empty cache, and evaluated through the cache; each report in metrics.jsonl
carries the high-water mark; a limit that cannot hold two files is one line before any
download."""

from __future__ import annotations

import json

from tests.data.helpers import write_imagenet
from tests.storage.conftest import refused, upload
from tfyard.cli import main
from tfyard.runfiles.layout import RunDirectory, WorkDirectory

SHARDS = 20   # 2 records each: an epoch is 10 steps of 4


def train(data: str, out, work, *flags, steps: int = 12) -> list[str]:
    """`steps` steps of a tiny model (12: into a second epoch), its example ids recorded."""
    return ["train", "--dataset", "imagenet", "--data_dir", data, "--model", "cifar_resnet8",
            "--image_size", "16", "--batch_size", "4", "--train_steps", str(steps),
            "--steps_per_loop", "6", "--seed", "7", "--record_example_ids", "--num_gpus", "0",
            "--quiet", "--no_jit_compile", "--no_export", "--output_dir", str(out),
            "--work_dir", str(work), *flags]


def ids(work) -> list[str]:
    with open(WorkDirectory(str(work)).member_example_ids("single"), encoding="utf-8") as lines:
        return [json.dumps(json.loads(line)["ids"]) for line in lines]


def test_a_set_ten_times_the_cache_reads_as_from_disk(s3, tmp_path, capsys, monkeypatch):
    data = tmp_path / "data"
    write_imagenet(data, {"train": [[1, 2]] * SHARDS, "validation": [[1, 2]] * 2})
    upload(s3, data, "big", "imagenet")
    sizes = [path.stat().st_size for path in data.iterdir()]
    limit = sum(sizes) // 10
    assert 2 * max(sizes) <= limit < 3 * max(sizes)

    assert "cannot hold two of the files" in refused(
        train("s3://big/imagenet", tmp_path / "refused", tmp_path / "refused-work",
              "--data_cache_limit", str(2 * max(sizes) - 1)), capsys)
    assert not (tmp_path / "refused-work" / "bucket-stream").exists()

    assert main(train(str(data), tmp_path / "here", tmp_path / "here-work", steps=16)) == 0
    here = ids(tmp_path / "here-work")
    work = tmp_path / "work"
    assert main(train("s3://big/imagenet", tmp_path / "there", work,
                      "--data_cache_limit", str(limit))) == 0
    assert ids(work) == here[:12]
    assert not (work / "bucket-data").exists()
    with open(RunDirectory(str(tmp_path / "there")).summary, encoding="utf-8") as stream:
        cache = json.load(stream)["data_cache"][0]
    assert cache["limit"] == limit and cache["fetched"] > 2 * limit   # read in pieces
    assert cache["high_water"] <= limit + cache["open_high"], cache
    # open at once: training's interleave (4 files read, 4 opened ahead), evaluation's 2
    assert cache["open_high"] <= 12 * max(sizes), cache
    with open(RunDirectory(str(tmp_path / "there")).metrics, encoding="utf-8") as lines:
        reports = [json.loads(line) for line in lines]
    marks = [report["data_cache_high_water"] for report in reports if report["kind"] == "train"]
    assert marks and 0 < marks[0] <= marks[-1] <= cache["high_water"], marks   # as it went

    # resumed on a new node: an empty cache, the limit from the environment
    monkeypatch.setenv("TFYARD_DATA_CACHE_LIMIT", str(limit))
    assert main(train("s3://big/imagenet", tmp_path / "there", tmp_path / "new-node",
                      steps=16)) == 0
    assert ids(tmp_path / "new-node") == here[12:]
    assert (tmp_path / "new-node" / "bucket-stream").is_dir()
    with open(RunDirectory(str(tmp_path / "there")).run_file, encoding="utf-8") as stream:
        assert json.load(stream)["data_cache_limit"] == limit
    capsys.readouterr()
    assert main(["evaluate", "--output_dir", str(tmp_path / "there")]) == 0   # the same path
    assert "top1" in capsys.readouterr().out
