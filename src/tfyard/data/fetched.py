"""Files in a bucket read through its bounded cache (`storage.stream`) in exactly the order
the pipeline reads them: the files ahead are announced as the pipeline comes to them (each
epoch's shards as the epoch starts; an image folder's images a block ahead), so the cache
fetches ahead; a file is opened once the cache holds it and released once read, so the
cache may remove it. A streamed set's files are interleaved on the pipeline's own thread
(`interleaved`), so the files open at once are only those the order interleaves. Files on
local disk pass through untouched."""

from __future__ import annotations

import os

from tfyard.storage import stream


def reading(files: list[str], open_file):
    """(open_file, announce) for `files`: `open_file` itself and None on local disk; else an
    `open_file` that waits for the file and releases it when read, and `announce(paths)`,
    which tells the cache an epoch's files (a string vector, returned unchanged)."""
    if not files or not stream.streamed(files[0]):
        return open_file, None
    import tensorflow as tf

    def py_path(call, path):
        local = tf.py_function(lambda value: call(os.fsdecode(value.numpy())) or "", [path],
                               tf.string)
        local.set_shape([])
        return local

    def open_fetched(path):
        # the release runs when the reader asks for the record after the last: an element
        # that the filter drops
        done = tf.data.Dataset.from_tensors(path).map(
            lambda value: py_path(stream.released, value)).filter(lambda _: False)
        return open_file(py_path(stream.opened, path)).concatenate(done)

    return open_fetched, _announcer()


def interleaved(paths, open_file, streamed: bool, cycle: int, parallel: int, *,
                block_length: int = 1, deterministic: bool = True):
    """`paths` (a dataset of file names) read by `open_file`, `cycle` files interleaved
    `block_length` records at a time, in the same order either way: from local disk by
    `parallel` threads; `streamed` (through the cache) on the pipeline's thread, which
    opens a file only when the order comes to it. Parallel readers would open files ahead
    (TensorFlow's prefetched inputs), each holding disk, and could wait for room that only
    the reader they hold up would free."""
    if streamed:
        return paths.interleave(open_file, cycle_length=cycle, block_length=block_length)
    return paths.interleave(open_file, cycle_length=cycle, block_length=block_length,
                            num_parallel_calls=parallel, deterministic=deterministic)


def contents(files: list[str]):
    """(read, announce) for whole files `files` (images): `tf.io.read_file` and None on
    local disk; else a `read(path)` that waits for the file, reads it and releases it (one
    Python call a file), and `announce` as `reading`'s."""
    import tensorflow as tf

    if not files or not stream.streamed(files[0]):
        return tf.io.read_file, None

    def held(path) -> bytes:
        with stream.held(os.fsdecode(path)) as local, open(local, "rb") as file:
            return file.read()

    def read(path):
        data = tf.numpy_function(held, [path], tf.string)
        data.set_shape([])
        return data

    return read, _announcer()


def _announcer():
    import tensorflow as tf

    def announce(paths):
        def told(values):
            stream.announce([os.fsdecode(value) for value in values.numpy()])
            return values

        said = tf.py_function(told, [paths], tf.string)
        said.set_shape(paths.shape)
        return said

    return announce
