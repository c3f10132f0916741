"""`tfyard.replace` and its scheme `tfyard.process.staged`: outputs checked first, replaced
whole, and never lost to a kill or to another writer; on real files and real processes killed
with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tfyard import replace
from tfyard.errors import UserError
from tfyard.process import staged

FILES = 300   # in each version of the directory: its removal takes a while to kill into

# A child that writes version after version of the directory `out` (each file holds the
# version; `done` is written last), printing each version once it is in place. With a second
# argument it kills itself (SIGKILL) in its second version's replacement: "exchanged" right
# after the one-step exchange, "set-aside" on a system without it, between its two renames.
WRITER = textwrap.dedent(f"""
    import os, sys
    from tfyard import replace
    from tfyard.process import staged
    out = sys.argv[1]
    if sys.argv[2:] == ["exchanged"]:
        exchange = staged._exchange
        def exchanged(one, other):
            exchange(one, other)
            os.kill(os.getpid(), 9)
        staged._exchange = exchanged
    if sys.argv[2:] == ["set-aside"]:
        staged._exchange = lambda one, other: False
        rename = os.rename
        def renamed(source, target):
            if target == out and os.path.isdir(os.path.join(os.path.dirname(source), "old")):
                os.kill(os.getpid(), 9)
            rename(source, target)
        os.rename = renamed
    version = 0
    while True:
        version += 1
        with replace.replacing_directory(out) as new:
            os.mkdir(new)
            for i in range({FILES}):
                with open(os.path.join(new, str(i)), "w") as f:
                    f.write(str(version))
            open(os.path.join(new, "done"), "w").close()
        print(version, flush=True)
""")


def _seen(out) -> tuple[bool, int | None] | None:
    """(is `done` there, how many entries) in the directory `out` names, read through one
    descriptor; None when `out` was replaced while it was read. A reader that opened the
    previous version just before the exchange sees it emptied as it is removed: that is
    the old version going, not `out` incomplete."""
    try:
        descriptor = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return False, None
    try:
        names = os.listdir(descriptor)
        try:
            if os.stat(out).st_ino != os.fstat(descriptor).st_ino:
                return None
        except FileNotFoundError:
            return False, None
        return "done" in names, len(names)
    finally:
        os.close(descriptor)


def _complete(out) -> bool:
    return _seen(out) == (True, FILES + 1)


def _writer(out, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(out), *extra],
                            stdout=subprocess.PIPE, text=True)


def test_a_file_and_a_directory_are_replaced_whole_and_leave_nothing_else(tmp_path):
    path = tmp_path / "rows.csv"
    for text in ("first", "second"):
        with replace.replacing_file(str(path)) as stream:
            stream.write(text)
    with pytest.raises(ValueError), replace.replacing_file(str(path)) as stream:
        stream.write("half")
        raise ValueError
    with pytest.raises(FileExistsError), replace.replacing_file(str(path), exclusive=True):
        pass
    folder = tmp_path / "parts"
    with replace.replacing_directory(str(folder)) as new:
        os.mkdir(new)
    with pytest.raises(ValueError), replace.replacing_directory(str(folder)) as new:
        os.mkdir(new)
        open(os.path.join(new, "half"), "w").close()
        raise ValueError
    assert path.read_text() == "second" and os.listdir(folder) == []
    assert sorted(os.listdir(tmp_path)) == ["parts", "rows.csv"]
    assert staged.staging_name("/a/b") != staged.staging_name("/a/b")
    assert staged.staging_name("/a/b").startswith("/a/.b.tmp-")


def test_a_writer_that_opens_its_file_by_name_replaces_it_whole(tmp_path):
    """`replacing_path`, as TensorFlow's TFRecordWriter uses it: the real writer, its file
    unseen until complete, a failed one leaving nothing, a killed one's leftover cleaned."""
    import tensorflow as tf

    shard = tmp_path / "train-00000-of-00001"
    for records in ([b"a"], [b"b", b"c"]):
        with replace.replacing_path(str(shard)) as staging, \
                tf.io.TFRecordWriter(staging) as writer:
            assert os.path.basename(staging).startswith(".train-00000-of-00001.tmp-")
            for record in records:
                writer.write(record)
            assert not shard.exists() or len(list(tf.data.TFRecordDataset(str(shard)))) == 1
    (tmp_path / ".train-00000-of-00001.tmp-killed").write_bytes(b"half")  # nobody holds it
    with pytest.raises(ValueError), replace.replacing_path(str(shard)) as staging:
        with open(staging, "wb") as stream:
            stream.write(b"half")
        raise ValueError
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(shard))] == [b"b", b"c"]
    assert os.listdir(tmp_path) == [shard.name]


def test_a_writer_killed_anywhere_leaves_the_previous_or_the_new_output(tmp_path):
    """Polled while a real writer replaces a large directory again and again and is
    killed at three moments: the output is there, complete, at every poll; a rerun cleans
    what the killed writer left."""
    out = tmp_path / "parts"
    missing, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            seen = _seen(out)
            if seen not in (None, (True, FILES + 1)):
                missing.append(seen)

    for delay in (0.05, 0.13, 0.31):
        child = _writer(out)
        assert child.stdout.readline()   # a first version is in place: poll from now on
        poller = threading.Thread(target=poll)
        poller.start()
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        stop.set()
        poller.join()
        stop.clear()
        assert not missing, f"polls saw (done there, entries) {missing[:5]}"
        assert _complete(out)
    with replace.replacing_directory(str(out)) as new:   # the rerun
        os.mkdir(new)
    assert sorted(os.listdir(tmp_path)) == ["parts"]


def test_a_writer_killed_right_after_the_exchange_leaves_the_new_output(tmp_path):
    out = tmp_path / "parts"
    child = _writer(out, "exchanged")
    assert child.stdout.readline().strip() == "1"
    assert child.wait() == -signal.SIGKILL
    assert _complete(out) and (out / "0").read_text() == "2"
    [leftover] = [p for p in tmp_path.iterdir() if p.name != "parts"]
    assert (leftover / "new" / "0").read_text() == "1"   # the previous, to be removed
    staged.recover(str(out))
    assert sorted(os.listdir(tmp_path)) == ["parts"] and (out / "0").read_text() == "2"


def test_a_previous_output_set_aside_by_a_killed_writer_is_put_back(tmp_path):
    """Without the one-step exchange, the previous directory is moved aside first; a writer
    killed between its two renames leaves it there, and the next writer puts it back before
    it starts."""
    out = tmp_path / "parts"
    child = _writer(out, "set-aside")
    assert child.stdout.readline().strip() == "1"
    assert child.wait() == -signal.SIGKILL   # in its second version's two renames
    assert not out.exists()
    [leftover] = tmp_path.iterdir()
    assert leftover.name.startswith(".parts.tmp-") and (leftover / "old" / "done").exists()
    staged.recover(str(out))
    assert _complete(out) and (out / "0").read_text() == "1"
    assert sorted(os.listdir(tmp_path)) == ["parts"]


def test_a_live_writers_staging_is_left_alone(tmp_path):
    """Two writers of one output: the second finishes while the first still writes, and
    leaves its staging alone; the first then finishes too, with one complete output."""
    out = tmp_path / "rows.csv"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys
            from tfyard import replace
            with replace.replacing_file(sys.argv[1]) as stream:
                stream.write("first")
                print("writing", flush=True)
                sys.stdin.readline()
        """), str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "writing\n"
    folder = tmp_path / "parts"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import os, sys
            from tfyard import replace
            with replace.replacing_directory(sys.argv[1]) as new:
                os.mkdir(new)
                print("writing", flush=True)
                sys.stdin.readline()
        """), str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "writing\n"
    live = {p.name for p in tmp_path.iterdir()}
    with replace.replacing_file(str(out)) as stream:
        stream.write("second")
    with replace.replacing_directory(str(folder)) as new:
        os.mkdir(new)
    staged.recover_all(str(tmp_path))
    assert live <= {p.name for p in tmp_path.iterdir()}   # the live staging untouched
    for process in (child, holder):
        process.communicate("\n")
        assert process.returncode == 0
    assert out.read_text() == "first" and sorted(os.listdir(tmp_path)) == ["parts", "rows.csv"]


@pytest.fixture
def read_only(tmp_path):
    """A directory that this user cannot write: /sys refuses even root."""
    if os.geteuid() == 0:
        return "/sys"
    place = tmp_path / "read-only"
    place.mkdir(mode=0o500)
    return str(place)


def test_an_output_that_cannot_be_written_is_one_line_naming_it_and_why(tmp_path, read_only):
    (tmp_path / "file").write_text("")
    cases = [
        (str(tmp_path), "file", "it is a directory; give a file name"),
        (str(tmp_path / "no" / "rows.csv"), "file", f"its directory {tmp_path / 'no'} does "
         "not exist; create it first"),
        (str(tmp_path / "file"), "directory", "it is a file; give a directory"),
        (str(tmp_path / "file" / "run"), "into", f"{tmp_path / 'file'} is a file"),
        (os.path.join(read_only, "rows.csv"), "file", f"{read_only} cannot be written ("),
        (os.path.join(read_only, "a", "run"), "into", f"{read_only} cannot be written ("),
    ]
    for path, kind, reason in cases:
        with pytest.raises(UserError) as caught:
            replace.check_writable(path, "--output", kind)
        assert str(caught.value).startswith(f"cannot write --output {path}: {reason}")
    replace.check_writable(str(tmp_path / "new" / "deeper"), "--output_dir", "into")
    replace.check_writable(str(tmp_path / "rows.csv"), "--output")
    assert sorted(os.listdir(tmp_path)) == ["file"]   # the probes leave nothing


def test_pack_checks_its_out_directory_before_writing(tmp_path, read_only, capsys):
    from tfyard.cli import main

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    out = os.path.join(read_only, "image")
    assert main(["pack", "--code_path", str(tmp_path / "code"), "--main", "train.py",
                 "--image", "demo", "--out", out]) == 2
    assert capsys.readouterr().err == (f"tfyard: error: cannot write --out {out}: {read_only} "
                                       "cannot be written (Permission denied); choose a "
                                       "writable place\n")
