"""Saves checkpoints back to back, each filling a large variable with its step number, so
that a SIGKILL from the test lands somewhere inside a save. usage: save_forever.py DIR"""

import sys

import tensorflow as tf

from tfyard.train.rundir.checkpoint import Checkpoints

directory = sys.argv[1]
values = tf.Variable(tf.zeros([4_000_000]))
step = tf.Variable(0, dtype=tf.int64)
checkpoints = Checkpoints(directory, True, 3, values=values, step=step)
checkpoints.restore_latest()
while True:
    step.assign_add(1)
    values.assign(tf.fill([4_000_000], tf.cast(step, tf.float32)))
    checkpoints.save(int(step.numpy()))
    print(int(step.numpy()), flush=True)
