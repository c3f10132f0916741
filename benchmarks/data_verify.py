"""`tfyard data inspect --verify` (and the `--skip_corrupt` count): records/sec of the
graph-mode parallel scan against the record-by-record eager scan it replaced.

Writes its own ~400x350 JPEG TFRecords (the input-pipeline benchmark's data), checks that
both scans report the same records, and prints both rates and the ratio.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from input_pipeline import write_data  # noqa: E402

from tfyard.data.formats.tfrecord import _slow_scan, scan_files  # noqa: E402


def record_by_record(files, decode):
    return [record for path in files for record in _slow_scan(path, 1001, -1, decode)]


def graph_pass(files, decode):
    return list(scan_files(files, 1001, -1, decode))


def timed(scan, files, decode) -> tuple[list, float]:
    start = time.perf_counter()
    records = scan(files, decode)
    return records, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1024, help="images to write")
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfyard-bench-") as root:
        write_data(root, args.images, args.shards)
        files = sorted(os.path.join(root, name) for name in os.listdir(root))
        for decode in (False, True):
            slow, slow_s = timed(record_by_record, files, decode)
            fast, fast_s = timed(graph_pass, files, decode)
            assert fast == slow, "the two scans disagree"
            what = "full decode" if decode else "header only"
            print(f"{what}: record by record {len(slow) / slow_s:7.1f} records/sec, "
                  f"graph pass {len(fast) / fast_s:7.1f} records/sec, "
                  f"ratio {slow_s / fast_s:.2f}x")


if __name__ == "__main__":
    main()
