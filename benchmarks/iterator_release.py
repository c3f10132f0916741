"""How long the code done with a long-lived tf.data iterator waits for its deletion: `del`
against `tfyard.data.release`, on pairs of iterators of the same age in one process.

TensorFlow 2.21 joins an iterator's autotuning thread when the iterator is deleted; once the
iterator has lived a minute or more that join now and then waits out a sleep of the thread,
up to 60 s. One pair per age in `--ages` is made at the start and read in turns; at its age
one of the pair is deleted in place and the other released. The printed ratio is the
callers' total wait with `del` over their total wait with `release`.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from tfyard.data.release import release  # noqa: E402


def pipeline():
    return iter(tf.data.Dataset.range(1 << 40).map(
        lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ages", default="90,110,130,150,170",
                        help="comma-separated seconds each pair lives before it is dropped")
    ages = sorted(float(age) for age in parser.parse_args().ages.split(","))
    pairs = [(pipeline(), pipeline()) for _ in ages]
    waited = {"del": [], "release": []}
    started = time.monotonic()
    while pairs:
        for deleted, released in pairs:
            next(deleted), next(released)
        time.sleep(0.01)
        if time.monotonic() - started < ages[len(waited["del"])]:
            continue
        deleted, released = pairs.pop(0)
        begin = time.monotonic()
        del deleted
        waited["del"].append(time.monotonic() - begin)
        begin = time.monotonic()
        release(released)
        del released
        waited["release"].append(time.monotonic() - begin)
    for side, seconds in waited.items():
        print(f"{side:>7}: waits {', '.join(f'{s:.3f}' for s in seconds)} s "
              f"(total {sum(seconds):.3f} s)")
    ratio = sum(waited["del"]) / max(sum(waited["release"]), 1e-4)
    print(f"iterators {ages[0]:.0f}-{ages[-1]:.0f} s old: the caller waits {ratio:.0f}x "
          f"longer with del than with release", flush=True)


if __name__ == "__main__":
    main()
