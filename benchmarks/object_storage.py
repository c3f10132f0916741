"""Data and runs in an S3 bucket against the same on local disk, in one run.

Starts moto's S3 server on 127.0.0.1 (the test server), then:

1. input: the same ImageNet-style TFRecord shards read by `build_dataset("imagenet")` from
   local disk and from `s3://` (tfyard copies the prefix to local disk first, so the steady
   rate is local disk's; the copy itself is timed against a plain client reading every
   object whole, one after another, from the same server);
2. training: `tfyard train` with `--output_dir s3://...` against a local output dir, the same
   flags, checkpoints every 50 steps, in alternated pairs; the step rate is each run's
   `mean_images_per_sec` (the mean of its chunks' rates, where a one-step chunk at an epoch
   end weighs as much as a ten-step one), also given as the same chunks' images over their
   seconds (each step weighing the same), and each run's last quarter and its tail (last
   report to exit: the final flush) are timed too, to tell a slower step from a slower end;
   and where each run's CPU went (`cpu_probe.py`: the threads that upload, an upper bound
   on their GIL hold) with the store server's and what was uploaded, figures a busy
   machine leaves alone;
3. streaming: a set of shards (`--stream_shards`, with `data convert`'s index of record
   counts) read through a `--data_cache_limit` of `--stream_limit_shards` shards (a cap:
   the files read count): the steady input rate (epochs two and three) through the bounded
   cache against local disk's, measured in the same run, and the store's own whole-object
   rate, with each side's CPU an image (this process's and the store server's), the peak
   disk against the limit, and `tfyard train`'s time to its first step from local disk,
   from the bucket through the cache, from the bucket at 1x (a tenth of the set, a whole
   copy, as it fits) and from the bucket copied whole (tfyard before the cache).

The server shares this machine's cores. For the training part it stands in for a remote
store, whose CPU is not the training node's, so that part has a server of its own at nice 19
(`serving`), which takes only what training leaves idle; its CPU seconds are printed apart.
Prints each rate and its ratio to its baseline (training: the median over pairs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import boto3  # noqa: E402
from input_pipeline import rate, write_data  # noqa: E402
from loopback import free_port, serve, stop  # noqa: E402

from tfyard.data import build_dataset  # noqa: E402
from tfyard.data.formats import streamed  # noqa: E402
from tfyard.data.formats.framing import count_records, write_index  # noqa: E402
from tfyard.storage import readable_dir, stores, stream  # noqa: E402

BUCKET = "bench"


@contextlib.contextmanager
def serving(lowest: bool):
    """moto's S3 server on 127.0.0.1, its endpoint in this process's environment and the
    bucket made: (the server, a client). `lowest`: every thread of it at nice 19 (on Linux a
    thread's, inherited by the threads it starts), for the training part: it stands in for a
    remote store, whose CPU is not the training node's, so it takes only what training
    leaves idle."""
    port = free_port()
    server, url = serve([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                         str(port)], port)
    try:
        if lowest:
            for thread in os.listdir(f"/proc/{server.pid}/task"):
                os.setpriority(os.PRIO_PROCESS, int(thread), 19)
        os.environ["AWS_ENDPOINT_URL_S3"] = url
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield server, client
    finally:
        stop(server)


def plain_read_seconds(client, prefix: str) -> float:
    """A plain client reading every object under `prefix` whole, one after another."""
    started = time.perf_counter()
    for item in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")["Contents"]:
        client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
    return time.perf_counter() - started


@dataclass
class Run:
    """One training run: its step rate, its wall time, and where its time went at the end."""

    rate: float        # mean_images_per_sec: the mean of the chunks' rates (first excluded)
    timed: float       # images over the same chunks' seconds: each step weighs the same
    wall: float        # the whole process, start-up to exit
    last_rate: float   # images/s over the last quarter of the reports
    tail: float        # seconds from the last report to the exit (final flush included)
    cpu: dict          # where the process's CPU went (`cpu_probe`), and the store server's


def process_seconds() -> float:
    """The CPU seconds this process has used so far, all its threads."""
    return sum(os.times()[:2])


def server_seconds(server: subprocess.Popen) -> float:
    """The CPU seconds the store's server has used so far."""
    with open(f"/proc/{server.pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return sum(map(int, fields[11:15])) / os.sysconf("SC_CLK_TCK")


def train_run(output_dir: str, copy: str, work: str, steps: int, flags: list[str],
              server: subprocess.Popen) -> Run:
    """`tfyard train` into `output_dir` (its files read from `copy`, the local one for a
    bucket), ResNet-20 on digits, checkpoints every 50 steps, then `flags`."""
    probe = os.path.join(work, "cpu.json")
    command = [sys.executable, os.path.join(os.path.dirname(__file__), "cpu_probe.py"), probe,
               "-m", "tfyard", "train", "--model", "cifar_resnet20",
               "--dataset", "digits", "--num_gpus", "0", "--seed", "1", "--quiet",
               "--train_steps", str(steps), "--checkpoint_every_steps", "50", "--no_export",
               "--output_dir", output_dir, "--work_dir", work, *flags]
    served, started = server_seconds(server), time.time()
    subprocess.run(command, check=True)
    ended = time.time()
    with open(probe) as handle:
        cpu = {**json.load(handle), "server": server_seconds(server) - served}
    with open(os.path.join(copy, "summary.json")) as handle:
        summary = json.load(handle)
    rate, batch = summary["mean_images_per_sec"], summary["global_batch"]
    with open(os.path.join(copy, "metrics.jsonl")) as handle:
        train = [r for r in map(json.loads, handle) if r["kind"] == "train"]
    last = train[-len(train) // 4 - 1:]
    last_rate = (last[-1]["step"] - last[0]["step"]) * batch / (last[-1]["time"] - last[0]["time"])
    steps = [(r["step"] - before["step"], r["step_time"])
             for before, r in zip(train, train[1:], strict=False)]
    timed = sum(n for n, _ in steps) * batch / sum(n * seconds for n, seconds in steps)
    return Run(rate, timed, ended - started, last_rate, ended - train[-1]["time"], cpu)


def upload_seconds(run: Run) -> float:
    """CPU seconds of the threads that upload (the publisher, boto3's transfer pools, the
    lease's renewals): an upper bound on the time they held the GIL."""
    return sum(seconds for name, seconds in run.cpu["threads"].items()
               if name.startswith(("tfyard-publish", "ThreadPoolExecutor", "tfyard-lease")))


def cpu_line(run: Run) -> str:
    """Where a run's CPU went (the process, its main thread, the threads that upload) and the
    store server's; what was uploaded (checkpoint files apart)."""
    uploads = run.cpu["uploads"]
    saves = [figure for name, figure in uploads.items() if name.startswith("ckpt-")]
    others = [figure for name, figure in uploads.items() if not name.startswith("ckpt-")]
    return (f"CPU s: process {run.cpu['process']:.1f}, main thread "
            f"{run.cpu['threads']['main']:.1f}, uploading threads {upload_seconds(run):.2f}, "
            f"the store's server {run.cpu['server']:.2f}; uploads: {len(saves)} checkpoint files"
            f" {sum(f['bytes'] for f in saves) / 1e6:.1f} MB, "
            f"{sum(f['calls'] for f in others)} others {sum(f['bytes'] for f in others) / 1e6:.2f}"
            " MB")


def train_pairs(root: str, pairs: int, steps: int, flags: list[str],
                server: subprocess.Popen) -> None:
    """`pairs` local and bucket runs, alternated (who goes first swaps each pair: drift on a
    shared machine falls on both); each figure the median over pairs of the ratio within."""
    runs: dict[str, list[Run]] = {"local": [], "s3": []}
    for pair in range(pairs):
        for side in ("local", "s3") if pair % 2 == 0 else ("s3", "local"):
            work = os.path.join(root, f"{side}-work-{pair}")
            if side == "local":
                out = copy = os.path.join(root, f"run-{pair}")
            else:
                out = f"s3://{BUCKET}/run-{pair}"
                copy = os.path.join(work, "bucket-runs", "s3", BUCKET, f"run-{pair}")
            runs[side].append(train_run(out, copy, work, steps, flags, server))
            print(f"  {side}: {cpu_line(runs[side][-1])}", flush=True)
        local, bucket = runs["local"][-1], runs["s3"][-1]
        print(f"pair {pair + 1}: local {local.rate:.0f} images/s (last quarter "
              f"{local.last_rate:.0f}, {local.wall:.1f} s, tail {local.tail:.1f} s); s3:// "
              f"{bucket.rate:.0f} (last quarter {bucket.last_rate:.0f}, {bucket.wall:.1f} s, "
              f"tail {bucket.tail:.1f} s); ratio {bucket.rate / local.rate:.3f}x", flush=True)

    def median(figure) -> float:
        return statistics.median(figure(bucket) / figure(local) for local, bucket
                                 in zip(runs["local"], runs["s3"], strict=True))

    print(f"training, checkpoints every 50 steps, median of {pairs} alternated pairs (s3:// / "
          f"local): step rate {median(lambda r: r.rate):.3f}x (target >= 0.97), the same "
          f"chunks' images over their seconds {median(lambda r: r.timed):.3f}x, last quarter's "
          f"rate {median(lambda r: r.last_rate):.3f}x, wall time {median(lambda r: r.wall):.3f}x,"
          f" tail {median(lambda r: r.tail):.2f}x")
    bucket = runs["s3"]
    print(f"bucket runs' upload work (median): uploading threads "
          f"{statistics.median(map(upload_seconds, bucket)):.2f} CPU s and the store's server "
          f"{statistics.median(r.cpu['server'] for r in bucket):.2f} CPU s, against the "
          f"process's {statistics.median(r.cpu['process'] for r in bucket):.1f} CPU s")


def read_input(client, root: str, args) -> None:
    """The shards read from local disk and from the bucket (its copy timed against a plain
    client's whole-object reads)."""
    shards = os.path.join(root, "shards")
    os.makedirs(shards)
    write_data(shards, args.images, args.shards)
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


def first_step_seconds(data_dir: str, work: str, limit: int | None) -> float:
    """Seconds from `tfyard train`'s start to its first step's report (one step a report),
    reading `data_dir` with the data cache `limit` (None: the default)."""
    out = os.path.join(work, "run")
    command = [sys.executable, "-m", "tfyard", "train", "--dataset", "imagenet", "--data_dir",
               data_dir, "--model", "cifar_resnet8", "--image_size", "32", "--batch_size",
               "8", "--train_steps", "2", "--steps_per_loop", "1", "--num_gpus", "0",
               "--seed", "1", "--quiet", "--no_jit_compile", "--no_export", "--output_dir",
               out, "--work_dir", work]
    if limit is not None:
        command += ["--data_cache_limit", str(limit)]
    started = time.time()
    subprocess.run(command, check=True)
    with open(os.path.join(out, "metrics.jsonl")) as handle:
        first = next(r for r in map(json.loads, handle) if r["kind"] == "train")
    return first["time"] - started


def stream_input(client, root: str, args, server: subprocess.Popen) -> None:
    """A set read through a data cache of `--stream_limit_shards` shards: steady input rate
    against local disk's, peak disk against the limit, first step."""
    shards = os.path.join(root, "stream-shards")
    os.makedirs(shards)
    write_data(shards, args.stream_images, args.stream_shards)
    first = sorted(os.listdir(shards))[0]
    shutil.copy(os.path.join(shards, first), os.path.join(shards, "validation-00000-of-00001"))
    names = sorted(os.listdir(shards))
    write_index(shards, {name: count_records(os.path.join(shards, name)) for name in names})
    sizes = {name: os.path.getsize(os.path.join(shards, name)) for name in names}
    total, limit = sum(sizes.values()), args.stream_limit_shards * max(sizes.values())
    one_tenth = [name for name in names if name.startswith("train-")][:args.stream_shards // 10]
    small = [name for name in names if name in one_tenth or not name.startswith("train-")]
    for name in names:
        client.upload_file(os.path.join(shards, name), BUCKET, f"stream/{name}")
        if name in small:   # a tenth of the set: 1x the limit
            client.upload_file(os.path.join(shards, name), BUCKET, f"small/{name}")
    print(f"streaming: {len(names)} files, {total / 1e6:.1f} MB, data cache limit "
          f"{limit / 1e6:.1f} MB ({total / limit:.1f}x); batch {args.batch_size}")

    plain = plain_read_seconds(client, "stream")
    epoch = args.stream_images // args.batch_size
    work = os.path.join(root, "stream-work")
    cached = readable_dir(f"s3://{BUCKET}/stream", work, streaming=stream.Streaming(
        limit, streamed("imagenet")))
    sides = {"local disk": shards, "s3:// through the cache": cached}
    rates: dict[str, list[float]] = {side: [] for side in sides}
    cpu: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
    for round_ in range(2):   # the second round in the reverse order; each side's best
        for side in (list(sides) if round_ == 0 else list(reversed(sides))):
            dataset = build_dataset("imagenet", "train", sides[side], batch_size=args.batch_size,
                                    cache_dir=work if side != "local disk" else None, seed=1)
            used, served, images = process_seconds(), server_seconds(server), 3 * args.stream_images
            # steady: epochs two and three, once the first epoch's cold fetches are done
            rates[side].append(rate(dataset, 2 * epoch, args.batch_size, warmup=epoch))
            cpu[side].append((1000 * (process_seconds() - used) / images,
                              1000 * (server_seconds(server) - served) / images))
    figures = stream.figures(work)[0]
    store_rate = args.stream_images * total / plain / sum(sizes[n] for n in names
                                                   if n.startswith("train-"))
    local, bucket = max(rates["local disk"]), max(rates["s3:// through the cache"])
    print(f"  steady input (two epochs): local disk {local:.0f} images/s, s3:// through the "
          f"cache {bucket:.0f} images/s: {bucket / local:.2f}x local disk; the store's "
          f"whole-object rate {store_rate:.0f} images/s: {bucket / store_rate:.2f}x it; "
          f"bound: {'local disk' if store_rate >= local else 'the store'}")
    print("  CPU ms an image (three epochs; a figure a busy machine leaves alone): " + "; ".join(
        f"{side}: this process {mine:.2f}, the store's server {its:.2f}"
        for side, (mine, its) in ((side, min(runs)) for side, runs in cpu.items())))
    print(f"  peak disk {figures['high_water'] / 1e6:.2f} MB, the files open and downloads "
          f"included, against the limit {limit / 1e6:.2f} MB: "
          f"{'within' if figures['high_water'] <= limit else 'OVER'} (files open at once at "
          f"most {figures['open_high'] / 1e6:.2f} MB); fetched "
          f"{figures['fetched'] / 1e6:.1f} MB; readers waited "
          f"{figures['wait_sec']:.1f} s")

    steps = {
        "local disk": (shards, None),
        "s3:// through the cache": (f"s3://{BUCKET}/stream", limit),
        "s3:// at 1x, copied whole as it fits": (f"s3://{BUCKET}/small",
                                                 sum(sizes[name] for name in small)),
        "s3:// copied whole (before the cache)": (f"s3://{BUCKET}/stream", 2 * total),
    }
    tries: dict[str, list[float]] = {side: [] for side in steps}
    for round_ in range(2):   # the second round in the reverse order; each side's best
        for side in (list(steps) if round_ == 0 else list(reversed(steps))):
            data, cap = steps[side]
            tries[side].append(first_step_seconds(
                data, os.path.join(root, f"first-{round_}-{list(steps).index(side)}"), cap))
    seconds = {side: min(values) for side, values in tries.items()}
    base = seconds["local disk"]
    one_file = max(sizes.values()) / (total / plain)
    for side, value in seconds.items():
        print(f"  first step, {side}: {value:.1f} s ({value - base:+.1f} s against local disk;"
              f" one file's download {one_file:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # ~14 MB shards: real ones are 100+ MB; much smaller ones time per-request overhead
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--train_steps", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=5,
                        help="training runs, a local and a bucket one each, alternated")
    parser.add_argument("--train_flags", default="",
                        help="more `tfyard train` flags for both sides (a quick probe on a "
                        "loaded machine: --image_size 16 --no_jit_compile)")
    parser.add_argument("--stream_images", type=int, default=8192,
                        help="streaming: images in the set read through the data cache")
    parser.add_argument("--stream_limit_shards", type=int, default=10,
                        help="streaming: the data cache limit, in shards (the largest)")
    parser.add_argument("--stream_shards", type=int, default=40,
                        help="streaming: the set split into this many shards (8192 in 40: "
                        "~6 MB shards; much smaller ones time each request's overhead, "
                        "~2 ms of CPU in the client and as much in the server)")
    parser.add_argument("--parts", nargs="+", choices=("input", "training", "streaming"),
                        default=["input", "training", "streaming"])
    args = parser.parse_args()
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    with tempfile.TemporaryDirectory(prefix="tfyard-bench-") as root:
        if {"input", "streaming"} & set(args.parts):
            with serving(lowest=False) as (server, client):
                if "input" in args.parts:
                    read_input(client, root, args)
                if "streaming" in args.parts:
                    stream_input(client, root, args, server)
        if "training" in args.parts:
            with serving(lowest=True) as (server, _):
                train_pairs(root, args.pairs, args.train_steps, args.train_flags.split(),
                            server)


if __name__ == "__main__":
    main()
