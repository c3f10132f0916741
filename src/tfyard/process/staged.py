"""The one scheme by which tfyard puts a file or a directory in place on local disk: built
under a hidden name beside it, and put there only when complete, so a kill or a second writer
never leaves a torn or lost one. `tfyard.replace` is the door for an output (its place checked
first, hdfs:// through gfile); `storage.mirror` puts a bucket's object in its local copy
through this module too, which is why it sits below `storage`.

- A staging name is `.NAME.tmp-<random hex>`: never a pid, which repeats (pid 1 in every
  container).
- The previous output stays until the new one is in place. A file is renamed over it. A
  directory trades names with it in one step (Linux `renameat2(RENAME_EXCHANGE)`), so the
  previous or the new output exists at every moment. Where the system cannot, the previous
  directory is first moved into the writer's staging entry: a writer killed between the two
  renames leaves it there, and the next writer of that output (or the run's lease holder)
  puts it back.
- A writer holds an exclusive `flock` on its staging entry while it lives, and a leftover is
  cleaned only when nobody holds it: another writer's staging is never touched, and two
  writers of one output both finish with one complete output.
- Three doors: `replacing_file` (an open file), `replacing_path` (a name, for a writer that
  opens its file itself) and `replacing_directory`; nothing else in tfyard renames a file
  into place (tests/test_layers.py checks).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import glob
import os
import shutil
import uuid

TMP = ".tmp-"
RENAME_EXCHANGE = 2   # linux/fs.h
AT_FDCWD = -100


def staging_name(path: str) -> str:
    """A new hidden name beside `path`, unique on every host: `.NAME.tmp-<hex>`."""
    directory, slash, name = path.rstrip("/").rpartition("/")
    return f"{directory}{slash}.{name}{TMP}{uuid.uuid4().hex[:16]}"


def staging_pattern(name: str) -> str:
    """The glob that matches every staging name of `name` (a base name) beside it."""
    return f".{glob.escape(name)}{TMP}*"



def _lock(descriptor: int) -> bool | None:
    """Take `descriptor`'s exclusive lock without waiting: True, False when another holds it,
    None where the file system keeps no locks."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return None


def _same(path: str, descriptor: int) -> bool:
    """Whether `path` still names the file open as `descriptor`."""
    try:
        named, held = os.stat(path), os.fstat(descriptor)
    except FileNotFoundError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _claim(path: str, directory: bool) -> tuple[str, int]:
    """A new staging entry beside `path`, created and locked: (its name, its descriptor)."""
    while True:
        name = staging_name(path)
        try:
            if directory:
                os.mkdir(name)
                descriptor = os.open(name, os.O_RDONLY)
            else:
                descriptor = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileNotFoundError:
            if not os.path.isdir(os.path.dirname(name)):
                raise
            continue   # a cleaner removed it in the moment before it was locked: a new name
        if _lock(descriptor) is not False and _same(name, descriptor):
            return name, descriptor
        os.close(descriptor)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def recover(path: str) -> None:
    """Clean what killed writers of `path` left beside it: a previous output they had set
    aside goes back in place if `path` is missing; the rest is removed. Entries that a live
    writer holds are left alone."""
    _clean(os.path.dirname(os.path.abspath(path)), glob.escape(os.path.basename(path)))


def recover_all(directory: str) -> None:
    """`recover` for every output in `directory`."""
    _clean(directory, "*")


def _clean(directory: str, name: str) -> None:
    for entry in glob.glob(os.path.join(glob.escape(directory), f".{name}{TMP}*")):
        try:
            descriptor = os.open(entry, os.O_RDONLY | os.O_NONBLOCK)   # a FIFO: no wait
        except OSError:
            continue   # gone meanwhile, or not ours to read
        try:
            if not _lock(descriptor) or not _same(entry, descriptor):
                continue   # a live writer's
            output = os.path.join(directory, os.path.basename(entry)[1:].rpartition(TMP)[0])
            aside = os.path.join(entry, "old")
            if os.path.isdir(aside) and not os.path.lexists(output):
                os.rename(aside, output)
            _remove(entry)
        finally:
            os.close(descriptor)


def _exchange(one: str, other: str) -> bool:
    """Trade the names `one` and `other` in one step; False where the system cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(AT_FDCWD, os.fsencode(one), AT_FDCWD, os.fsencode(other), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), other)


def _put_directory(new: str, path: str, holder: str) -> None:
    """`new` takes `path`'s place; a previous `path` ends inside `holder`."""
    while True:
        try:
            os.rename(new, path)   # no previous output (or an empty directory)
            return
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        if _exchange(new, path):
            return
        aside = os.path.join(holder, "old")
        _remove(aside)   # set aside by a turn before this one, and since replaced by another's
        with contextlib.suppress(FileNotFoundError):
            os.rename(path, aside)


def _text(mode: str) -> dict:
    return {} if "b" in mode else {"encoding": "utf-8", "newline": ""}


@contextlib.contextmanager
def replacing_file(path: str, mode: str = "w", exclusive: bool = False):
    """An open file (`mode` "w" or "wb") that takes `path`'s place, synced, when the block
    ends without an error; on an error or a kill `path` stays as it was. `exclusive`: create
    `path` only if it does not exist (FileExistsError otherwise)."""
    path = os.path.abspath(path)
    recover(path)
    try:   # unnamed until complete: a kill leaves nothing
        descriptor, staging = os.open(os.path.dirname(path), os.O_TMPFILE | os.O_WRONLY,
                                      0o666), None
        _lock(descriptor)   # before it has a name, so nobody sees it unlocked
    except (AttributeError, OSError):   # no O_TMPFILE here (macOS, some network file systems)
        staging, descriptor = _claim(path, directory=False)
    try:
        with os.fdopen(descriptor, mode, **_text(mode)) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
            if staging is None:
                staging = _name(stream.fileno(), staging_name(path))
            if exclusive:
                os.link(staging, path)
            else:
                os.replace(staging, path)
                staging = None
    finally:
        if staging is not None:
            _remove(staging)


@contextlib.contextmanager
def replacing_path(path: str):
    """A staging name for a writer that opens its file by name (`tf.io.TFRecordWriter`): the
    file written there takes `path`'s place, synced, when the block ends without an error; on
    an error or a kill `path` stays as it was. The name is created empty and locked, and the
    writer truncates that same file."""
    path = os.path.abspath(path)
    recover(path)
    staging, descriptor = _claim(path, directory=False)
    try:
        yield staging
        os.fsync(descriptor)   # the writer's file: the one this descriptor holds
        os.replace(staging, path)
        staging = None
    finally:
        os.close(descriptor)
        if staging is not None:
            _remove(staging)


def _name(descriptor: int, name: str) -> str:
    """Give the unnamed file `descriptor` the name `name` (linkat through /proc with
    AT_SYMLINK_FOLLOW, which os.link uses only when given a directory descriptor)."""
    folder = os.open(os.path.dirname(name), os.O_RDONLY)
    try:
        os.link(f"/proc/self/fd/{descriptor}", os.path.basename(name), dst_dir_fd=folder)
    finally:
        os.close(folder)
    return name


@contextlib.contextmanager
def replacing_directory(path: str):
    """A path (not yet created) to build the new directory at; it takes `path`'s place when
    the block ends without an error. On an error or a kill `path` stays as it was."""
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    recover(path)
    holder, descriptor = _claim(path, directory=True)
    try:
        new = os.path.join(holder, "new")
        yield new
        _put_directory(new, path, holder)
    finally:
        _remove(holder)
        os.close(descriptor)
