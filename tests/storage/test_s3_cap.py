"""`--data_cache_limit` is a cap: two members of a `tfyard launch local` cluster train and
evaluate on a TFRecord set in a real S3 server, through one work dir, and the bytes of
streamed data there, files read and downloads in progress included, sampled every 50 ms,
never pass the limit, with `--seed` and without (where local disk would interleave 16
shards)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from tests.data.helpers import speckled, write_imagenet
from tests.storage.conftest import upload
from tfyard.storage import sharing

pytestmark = pytest.mark.cluster
INDEX_ROOM = 4096   # shard_index.json for 20 shards: ~1.8 kB


def peak_while(command: list[str], folder) -> tuple[subprocess.CompletedProcess, int]:
    """`command` run to its end, and the most bytes `folder` held meanwhile."""
    peak, done = [0], threading.Event()

    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], sharing.disk_used(str(folder)))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    finally:
        done.set()
        sampler.join()
    return run, peak[0]


@pytest.mark.parametrize("order", [["--seed", "7"], []], ids=["seeded", "unseeded"])
def test_two_members_training_and_evaluating_stay_within_the_limit(order, s3, tmp_path):
    data = tmp_path / "data"
    write_imagenet(data, {"train": [[1, 2, 1, 2]] * 16, "validation": [[1, 2]] * 4},
                   pixels=speckled)
    bucket = f"capped-{len(order)}"   # each case its own: a run leaves an index beside
    upload(s3, data, bucket, "imagenet")
    sizes = {path.name: path.stat().st_size for path in data.iterdir()}
    # a member holds one training shard and the evaluation shards open at once
    need = max(size for name, size in sizes.items() if name.startswith("train-")) + sum(
        size for name, size in sizes.items() if name.startswith("validation-"))
    # each member's share holds what it opens, and the shards' record-count index that the
    # first member to walk them writes beside them (a member starting later fetches it too)
    limit = 2 * (need + INDEX_ROOM)
    assert sum(sizes.values()) > 2 * limit   # read in pieces
    work = tmp_path / "work"
    train = [sys.executable, "-m", "tfyard", "train", "--dataset", "imagenet", "--data_dir",
             f"s3://{bucket}/imagenet", "--model", "cifar_resnet8", "--image_size", "16",
             "--batch_size", "8", "--train_steps", "24", "--steps_per_loop", "4",
             "--eval_every_steps", "8", *order, "--num_gpus", "0", "--quiet",
             "--no_jit_compile", "--no_export", "--data_cache_limit", str(limit),
             "--output_dir", str(tmp_path / "out"), "--work_dir", str(work)]
    run, peak = peak_while([sys.executable, "-m", "tfyard", "launch", "local", "--workers",
                            "2", "--", *train], work / "bucket-stream")
    assert run.returncode == 0, [line for line in run.stdout.splitlines() + [run.stderr]
                                 if "error" in line and "tfyard" in line]
    assert 0 < peak <= limit, (peak, limit)
    # both members streamed, each into its own root
    roots = {path.name for path in (work / "bucket-stream" / "s3" / bucket).iterdir()
             if path.is_dir()}
    assert roots == {"imagenet", "imagenet.1"}, roots
