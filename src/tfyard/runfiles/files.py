"""The file operations on a run's files, the lower half of its one seam (`layout` is the
upper: the names). Every reader and writer of a run reads and writes through
`files_for(path)`:

- `LocalFiles`: local disk, whole-file replaces through `tfyard.replace`, the lease's
  atomic link and move;
- `TensorFlowFiles`: a path TensorFlow's own file systems open (hdfs://); it has no
  atomic link, so it holds no lease (`lease.take_lease`);
- `objects.BucketFiles`: objects under a bucket prefix (s3://, gs://), through tfyard's own
  stores. TensorFlow cannot write s3://, and neither store has an atomic rename, so a run in
  a bucket is trained in a local copy (these `LocalFiles`) and published by
  `train.rundir.bucket`; what reads it, or amends its small files, goes through these calls.

A store that TensorFlow can open is one more class with these methods, picked by its scheme
in `files_for`.
"""

from __future__ import annotations

import glob
import os
import shutil
import time
from collections.abc import Callable

from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.process.staged import recover_all
from tfyard.replace import replacing_directory, replacing_file
from tfyard.runfiles.objects import BucketFiles
from tfyard.storage import in_bucket, scheme_of


class LocalFiles:
    remote = False
    lag_s = 0.0   # how far a file here may lag behind its writer (none: it is written here)

    def failures(self) -> tuple[type[BaseException], ...]:
        """What a failed read or write here raises."""
        return (OSError,)

    def has(self, path: str) -> bool:
        return os.path.exists(path)

    def is_directory(self, path: str) -> bool:
        return os.path.isdir(path)

    def read_whole(self, path: str) -> str:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def read_from(self, path: str, offset: int) -> bytes:
        """The bytes of `path` from `offset` on (what a growing file gained); none if it is
        missing."""
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read()
        except FileNotFoundError:
            return b""

    def size(self, path: str) -> int:
        """The bytes `path` holds; 0 if it is missing."""
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            return 0

    def write_whole(self, path: str, text: str | bytes, exclusive: bool = False) -> None:
        """`path` replaced whole (readers never see half a file) by `text` (bytes for a
        binary file); with `exclusive`, FileExistsError if it exists (an atomic create)."""
        mode = "wb" if isinstance(text, bytes) else "w"
        with replacing_file(path, mode, exclusive=exclusive) as handle:
            handle.write(text)

    def amend(self, path: str, amend: Callable[[bytes | None], bytes | None]) -> None:
        """`path` rewritten whole as `amend(its bytes, None when absent)` returns them (None:
        left as it is). One writer at a time: the run's lease."""
        before = self.read_from(path, 0) if self.has(path) else None
        after = amend(before)
        if after is not None:
            self.write_whole(path, after)

    def appending(self, path: str):
        """A text handle appending to `path` (created if missing)."""
        import tensorflow as tf

        return tf.io.gfile.GFile(path, "a")

    def ends_torn(self, path: str) -> bool:
        """Whether `path` exists and its last line has no newline (a write cut short)."""
        try:
            with open(path, "rb") as handle:
                if handle.seek(0, os.SEEK_END) == 0:
                    return False
                handle.seek(-1, os.SEEK_END)
                return handle.read(1) != b"\n"
        except FileNotFoundError:
            return False

    def matching(self, pattern: str) -> list[str]:
        return glob.glob(pattern)

    def remove(self, path: str) -> None:
        """Remove the one file `path`."""
        os.remove(path)

    def delete(self, path: str) -> None:
        """Remove a file, or a directory with everything in it."""
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)

    def make_directory(self, path: str) -> None:
        """`path` and the directories above it; one line when it cannot be made."""
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create directory {path!r} ({exc.strerror}); choose a "
                            "writable location") from None

    def copy(self, source: str, target: str) -> None:
        shutil.copyfile(source, target)

    def move(self, source: str, target: str) -> None:
        os.rename(source, target)

    def hard_link(self, source: str, target: str) -> None:
        """A second name for `source`; FileExistsError if `target` exists (atomic)."""
        os.link(source, target)

    def age(self, path: str) -> float:
        """Seconds since `path` was last written or touched."""
        return max(0.0, time.time() - self.modified(path))

    def modified(self, path: str) -> float:
        """When `path` was last written or touched (seconds since the epoch)."""
        return os.stat(path).st_mtime

    def refresh(self, path: str) -> None:
        os.utime(path)

    def staged_directory(self, path: str):
        """A context giving a staging directory that replaces `path` whole when it exits."""
        return replacing_directory(path)

    def recover_writes(self, directory: str) -> None:
        """Put right what a killed `tfyard.replace` writer left in `directory`."""
        recover_all(directory)


class TensorFlowFiles(LocalFiles):
    """A remote path through `tf.io.gfile`; writes and listings only, no lease."""

    remote = True

    def failures(self) -> tuple[type[BaseException], ...]:
        import tensorflow as tf

        return (tf.errors.OpError, OSError)

    def has(self, path: str) -> bool:
        import tensorflow as tf

        return tf.io.gfile.exists(path)

    def is_directory(self, path: str) -> bool:
        import tensorflow as tf

        return tf.io.gfile.isdir(path)

    def read_whole(self, path: str) -> str:
        import tensorflow as tf

        with tf.io.gfile.GFile(path) as handle:
            return handle.read()

    def read_from(self, path: str, offset: int) -> bytes:
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            return b""
        with tf.io.gfile.GFile(path, "rb") as handle:
            handle.seek(offset)
            return handle.read()

    def size(self, path: str) -> int:
        import tensorflow as tf

        return tf.io.gfile.stat(path).length if tf.io.gfile.exists(path) else 0

    def ends_torn(self, path: str) -> bool:
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            return False
        size = tf.io.gfile.stat(path).length
        if size == 0:
            return False
        with tf.io.gfile.GFile(path, "rb") as handle:
            handle.seek(size - 1)
            return handle.read(1) != b"\n"

    def matching(self, pattern: str) -> list[str]:
        import tensorflow as tf

        return tf.io.gfile.glob(pattern)

    def remove(self, path: str) -> None:
        import tensorflow as tf

        tf.io.gfile.remove(path)

    def delete(self, path: str) -> None:
        import tensorflow as tf

        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)

    def make_directory(self, path: str) -> None:
        import tensorflow as tf

        tf.io.gfile.makedirs(path)

    def modified(self, path: str) -> float:
        import tensorflow as tf

        return tf.io.gfile.stat(path).mtime_nsec / 1e9

    def recover_writes(self, directory: str) -> None:
        """Nothing to put right: remote writes are staged and renamed by TensorFlow."""

    def _unsupported(self, *_args):
        raise OSError(f"{type(self).__name__} cannot do this on a remote path")

    copy = move = hard_link = refresh = _unsupported


def files_for(path: str) -> LocalFiles | BucketFiles:
    """The file operations for `path`: by its scheme, local disk when it has none."""
    if scheme_of(path) is None:
        return LocalFiles()
    if in_bucket(path, OUTPUT_FLAG):
        return BucketFiles(scheme_of(path))
    return TensorFlowFiles()
