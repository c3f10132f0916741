"""Saves checkpoints back to back, each filling a large variable with its step number, so
that a SIGKILL from the test lands somewhere inside a save. usage: save_forever.py DIR

TensorFlow is imported once, before it runs anything; each line read from stdin forks a
fresh saver process (its runtime starts in the child), which prints its pid, then each step
it saved. The test SIGKILLs that child; this process then prints how it ended and waits for
the next line. One import for every kill point."""

import os
import sys

import tensorflow as tf

from tfyard.train.rundir.checkpoint import Checkpoints


def save_forever(directory: str) -> None:
    values = tf.Variable(tf.zeros([4_000_000]))
    step = tf.Variable(0, dtype=tf.int64)
    checkpoints = Checkpoints(directory, True, 3, values=values, step=step)
    checkpoints.restore_latest()
    while True:
        step.assign_add(1)
        values.assign(tf.fill([4_000_000], tf.cast(step, tf.float32)))
        checkpoints.save(int(step.numpy()))
        print(int(step.numpy()), flush=True)


for _ in sys.stdin:
    child = os.fork()
    if child == 0:
        try:
            print(os.getpid(), flush=True)
            save_forever(sys.argv[1])
        finally:
            os._exit(1)   # never back into the loop: only this process's parent reads stdin
    _, status = os.waitpid(child, 0)
    print(f"ended {os.waitstatus_to_exitcode(status)}", flush=True)
