"""Seeded, step-addressable input against today's buffer-shuffled pipeline, and resume cost.

Writes its own ~400x350 JPEG TFRecords in the ImageNet layout (the input-pipeline
benchmark's data), then measures in one run, alternating the two pipelines round by round:
(a) `build_dataset("imagenet", "train")` without a seed: sloppy parallel interleave and a
10,000-record shuffle buffer; (b) the same with `seed=`: seeded shard order, windows
permuted by `index_shuffle`, stateless crops, deterministic parallel map. Then the resume
cost of a kill at mid-epoch: the time to the first batch when starting at the middle
against starting at 0, and the raw-record skip rate, extrapolated to ImageNet.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from input_pipeline import rate, write_data  # noqa: E402

from tfyard.data import build_dataset  # noqa: E402
from tfyard.data.order import WINDOW  # noqa: E402

IMAGENET_TRAIN, IMAGENET_SHARD = 1_281_167, 1_252  # records, and per shard of 1024


def first_batch_seconds(root: str, args, start: int) -> float:
    started = time.perf_counter()
    next(iter(build_dataset("imagenet", "train", root, batch_size=args.batch_size,
                            image_size=args.image_size, seed=1, start_example=start,
                            cache_dir=os.path.join(root, "work"))))
    return time.perf_counter() - started


def raw_skip_rate(root: str) -> tuple[int, float]:
    """(records, records/sec) of skipping every raw record of the split, nothing parsed."""
    import tensorflow as tf

    files = sorted(tf.io.gfile.glob(os.path.join(root, "train-*")))
    records = tf.data.TFRecordDataset(files, buffer_size=8 << 20)
    count = int(records.reduce(0, lambda n, _: n + 1))  # warm the page cache
    started = time.perf_counter()
    for _ in records.skip(count - 1):
        pass
    return count, count / (time.perf_counter() - started)


def throughput(root: str, args) -> tuple[float, float]:
    """Median images/sec of (today's pipeline, the seeded one), alternating rounds."""
    rates = {False: [], True: []}
    for _ in range(args.rounds):
        for seeded in (False, True):
            dataset = build_dataset("imagenet", "train", root, batch_size=args.batch_size,
                                    image_size=args.image_size, seed=1 if seeded else None,
                                    cache_dir=os.path.join(root, "work"))
            rates[seeded].append(rate(dataset, args.batches, args.batch_size))
    return statistics.median(rates[False]), statistics.median(rates[True])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=384, help="images to write")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--batches", type=int, default=16, help="batches timed per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfyard-bench-") as root:
        write_data(root, args.images, args.shards)
        today, seeded = throughput(root, args)
        middle = (args.images // 2 // args.batch_size) * args.batch_size
        cold = statistics.median(first_batch_seconds(root, args, 0) for _ in range(3))
        resumed = statistics.median(first_batch_seconds(root, args, middle) for _ in range(3))
        records, skip_rate = raw_skip_rate(root)
    print(f"cpus: {os.cpu_count()}  images: {args.images} in {args.shards} shards  "
          f"batch: {args.batch_size}  rounds: {args.rounds} x {args.batches} batches")
    print(f"today (no seed: buffer shuffle, sloppy):   {today:8.1f} images/sec")
    print(f"seeded (addressed order, stateless crops): {seeded:8.1f} images/sec")
    print(f"ratio seeded/today: {seeded / today:.3f}x (target >= 0.95)")
    print(f"first batch from example 0: {cold:.3f} s, from example {middle} (mid-epoch): "
          f"{resumed:.3f} s, extra {resumed - cold:+.3f} s")
    print(f"raw records skipped: {skip_rate:,.0f} records/sec ({records} records)")
    worst = WINDOW + IMAGENET_SHARD  # whole shards are skipped without reading them
    print(f"ImageNet ({IMAGENET_TRAIN:,} records): a resume reads at most {worst:,} raw "
          f"records ({worst / skip_rate:.2f} s at this rate), wherever the kill; a skip after "
          f"decode would take {IMAGENET_TRAIN / 2 / seeded / 60:.0f} min at mid-epoch at "
          "the seeded decode rate above")


if __name__ == "__main__":
    main()
