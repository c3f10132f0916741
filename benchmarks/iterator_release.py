"""How long the code done with a long-lived tf.data iterator waits for its deletion: `del`
against `tfyard.data.release`, on two iterators of the same age in one process.

TensorFlow 2.21's autotuning thread sleeps in 60 s periods once an iterator has lived about
80 s, and deleting the iterator joins that thread. Both iterators are made together, read in
turns for `--age` seconds, then one is deleted in place and one released; the printed ratio
is the caller's wait with `del` over its wait with `release`.
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
    parser.add_argument("--age", type=float, default=120.0,
                        help="seconds each iterator lives before it is dropped")
    age = parser.parse_args().age
    deleted, released = pipeline(), pipeline()
    started = time.monotonic()
    while time.monotonic() - started < age:
        next(deleted), next(released)
        time.sleep(0.01)
    begin = time.monotonic()
    del deleted
    waited_del = time.monotonic() - begin
    begin = time.monotonic()
    release(released)
    del released
    waited_release = time.monotonic() - begin
    print(f"iterators {age:.0f} s old: del waited {waited_del:.3f} s, release waited "
          f"{waited_release:.4f} s: {waited_del / max(waited_release, 1e-4):.0f}x", flush=True)


if __name__ == "__main__":
    main()
