"""Data and runs in an S3 bucket against the same on local disk, in one run.

Starts moto's S3 server on 127.0.0.1 (the test server: it shares this machine's cores), then:

1. input: the same ImageNet-style TFRecord shards read by `build_dataset("imagenet")` from
   local disk and from `s3://` (tfyard copies the prefix to local disk first, so the steady
   rate is local disk's; the copy itself is timed against a plain client reading every
   object whole, one after another, from the same server);
2. training: `tfyard train` with `--output_dir s3://...` against a local output dir, the same
   flags, checkpoints every 50 steps; the step rate is each run's `mean_images_per_sec`.

Prints each rate and its ratio to its baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import boto3  # noqa: E402
from input_pipeline import rate, write_data  # noqa: E402
from loopback import free_port, serve, stop  # noqa: E402

from tfyard.data import build_dataset  # noqa: E402
from tfyard.storage import readable_dir, stores  # noqa: E402

BUCKET = "bench"


def start_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    return serve([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port)


def plain_read_seconds(client, prefix: str) -> float:
    """A plain client reading every object under `prefix` whole, one after another."""
    started = time.perf_counter()
    for item in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")["Contents"]:
        client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
    return time.perf_counter() - started


def train_rate(output_dir: str, work: str, steps: int) -> float:
    command = [sys.executable, "-m", "tfyard", "train", "--model", "cifar_resnet20",
               "--dataset", "digits", "--num_gpus", "0", "--seed", "1", "--quiet",
               "--train_steps", str(steps), "--checkpoint_every_steps", "50", "--no_export",
               "--output_dir", output_dir, "--work_dir", work]
    subprocess.run(command, check=True)
    summary = os.path.join(output_dir, "summary.json")
    if output_dir.startswith("s3://"):
        client = boto3.client("s3")
        key = output_dir.split("/", 3)[3] + "/summary.json"
        return json.loads(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())[
            "mean_images_per_sec"]
    with open(summary) as handle:
        return json.load(handle)["mean_images_per_sec"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # ~14 MB shards: real ones are 100+ MB; much smaller ones time per-request overhead
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--train_steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="training runs of each kind")
    args = parser.parse_args()
    server, endpoint = start_server()
    settings = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": endpoint}
    os.environ.update(settings)
    try:
        with tempfile.TemporaryDirectory(prefix="tfyard-bench-") as root:
            shards = os.path.join(root, "shards")
            os.makedirs(shards)
            write_data(shards, args.images, args.shards)
            client = boto3.client("s3")
            client.create_bucket(Bucket=BUCKET)
            for name in sorted(os.listdir(shards)):
                client.upload_file(os.path.join(shards, name), BUCKET, f"shards/{name}")
            size = sum(os.path.getsize(os.path.join(shards, n)) for n in os.listdir(shards))

            plain = plain_read_seconds(client, "shards")
            stores.of("s3")   # made once a process; the plain client above is made already
            started = time.perf_counter()
            readable_dir(f"s3://{BUCKET}/shards", os.path.join(root, "work"))
            copy = time.perf_counter() - started
            print(f"copy of {size / 1e6:.1f} MB: {size / copy / 1e6:.1f} MB/s; a plain client's "
                  f"whole-object reads: {size / plain / 1e6:.1f} MB/s; ratio {plain / copy:.2f}x")

            rates = {}
            for place in (shards, f"s3://{BUCKET}/shards"):
                dataset = build_dataset("imagenet", "train", place, batch_size=args.batch_size,
                                        cache_dir=os.path.join(root, "work"))
                rates[place] = rate(dataset, args.batches, args.batch_size)
            local, bucket = rates[shards], rates[f"s3://{BUCKET}/shards"]
            print(f"input pipeline: local disk {local:.0f} images/s, s3:// {bucket:.0f} "
                  f"images/s; ratio {bucket / local:.2f}x")

            local_train, bucket_train = [], []
            for round_ in range(args.rounds):   # alternated: drift on a shared machine
                local_train.append(train_rate(os.path.join(root, f"run{round_}"),
                                              os.path.join(root, f"w{round_}"),
                                              args.train_steps))
                bucket_train.append(train_rate(f"s3://{BUCKET}/run{round_}",
                                               os.path.join(root, f"v{round_}"),
                                               args.train_steps))
            local, bucket = max(local_train), max(bucket_train)
            print(f"training, checkpoints every 50 steps (best of {args.rounds}): local output "
                  f"{local:.0f} images/s, s3:// output {bucket:.0f} images/s; ratio "
                  f"{bucket / local:.2f}x")
    finally:
        stop(server)


if __name__ == "__main__":
    main()
