"""The one way tfyard writes an output, a file or a directory: its place checked before the
work (`check_writable`), then written by `process.staged`'s scheme (built under a hidden
name beside it, put in place only when complete). A path with a scheme (hdfs://) goes through
`tf.io.gfile`: staged and renamed the same way, without the lock or the one-step exchange,
which object stores do not have.
"""

from __future__ import annotations

import contextlib
import errno
import os

from tfyard.errors import UserError
from tfyard.process import staged
from tfyard.process.staged import staging_name
from tfyard.storage import refuse_bucket, scheme_of


def _remote(path: str) -> bool:
    return scheme_of(path) is not None


def check_writable(path: str, label: str, kind: str = "file") -> None:
    """Refuse in one line, before any work, an output that cannot be written. `kind`: "file"
    (replaced whole; its directory must exist), "directory" (replaced whole) or "into" (a
    directory written into); the directories missing above those two are created later."""
    refuse_bucket(path, label, "tfyard cannot write into")
    if _remote(path):
        return   # an object store says so on the first write; probing it costs a round trip
    path = os.path.abspath(os.path.expanduser(path))

    def refuse(reason: str):
        raise UserError(f"cannot write {label} {path}: {reason}")

    if kind == "file" and os.path.isdir(path):
        refuse("it is a directory; give a file name")
    if kind != "file" and os.path.lexists(path) and not os.path.isdir(path):
        refuse("it is a file; give a directory")
    place = path if kind == "into" and os.path.isdir(path) else os.path.dirname(path)
    if kind == "file" and not os.path.isdir(place):
        refuse(f"its directory {place} does not exist; create it first")
    while not os.path.lexists(place):
        place = os.path.dirname(place)
    if not os.path.isdir(place):
        refuse(f"{place} is a file, not a directory")
    try:
        _probe(place)
    except OSError as exc:
        refuse(f"{place} cannot be written ({exc.strerror}); choose a writable place")


def _probe(directory: str) -> None:
    """Create a file in `directory` and let it go: an unnamed one where the system can
    (O_TMPFILE), so a kill at this moment leaves nothing behind."""
    unnamed = getattr(os, "O_TMPFILE", None)   # Linux
    try:
        if unnamed is not None:
            os.close(os.open(directory, unnamed | os.O_WRONLY, 0o600))
            return
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
    probe = staging_name(os.path.join(directory, "tfyard-probe"))
    os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    os.unlink(probe)


@contextlib.contextmanager
def replacing_file(path: str, mode: str = "w", exclusive: bool = False):
    """An open file (`mode` "w" or "wb") that takes `path`'s place, synced, when the block
    ends without an error; on an error or a kill `path` stays as it was. `exclusive`: create
    `path` only if it does not exist (FileExistsError otherwise)."""
    with (_remote_file(path, mode, exclusive) if _remote(path)
          else staged.replacing_file(path, mode, exclusive)) as stream:
        yield stream


@contextlib.contextmanager
def replacing_path(path: str):
    """A staging name for a writer that opens its file by name (`tf.io.TFRecordWriter`): the
    file written there takes `path`'s place when the block ends without an error."""
    with (_remote_staged(path, exclusive=False) if _remote(path)
          else staged.replacing_path(path)) as staging:
        yield staging


@contextlib.contextmanager
def replacing_directory(path: str):
    """A path (not yet created) to build the new directory at; it takes `path`'s place when
    the block ends without an error. On an error or a kill `path` stays as it was."""
    with (_remote_directory(path) if _remote(path)
          else staged.replacing_directory(path)) as new:
        yield new


@contextlib.contextmanager
def _remote_file(path: str, mode: str, exclusive: bool):
    import tensorflow as tf

    with _remote_staged(path, exclusive) as staging, tf.io.gfile.GFile(staging, mode) as stream:
        yield stream


@contextlib.contextmanager
def _remote_staged(path: str, exclusive: bool):
    """A staging name beside the remote `path`, renamed over it when the block ends."""
    import tensorflow as tf

    staging = staging_name(path)
    try:
        yield staging
        if exclusive and tf.io.gfile.exists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
        tf.io.gfile.rename(staging, path, overwrite=True)
    finally:
        if tf.io.gfile.exists(staging):
            tf.io.gfile.remove(staging)


@contextlib.contextmanager
def _remote_directory(path: str):
    import tensorflow as tf

    new, aside = staging_name(path), staging_name(path)
    try:
        yield new
        if tf.io.gfile.exists(path):
            tf.io.gfile.rename(path, aside)
        try:
            tf.io.gfile.rename(new, path)
        except BaseException:
            if tf.io.gfile.exists(aside) and not tf.io.gfile.exists(path):
                tf.io.gfile.rename(aside, path)   # the previous output back in place
            raise
        if tf.io.gfile.exists(aside):
            tf.io.gfile.rmtree(aside)
    finally:
        if tf.io.gfile.exists(new):
            tf.io.gfile.rmtree(new)
