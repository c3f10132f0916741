"""A checkpoint cut short, or a disk that fills up, never costs the previous checkpoint.

The kills are real SIGKILLs of fresh processes; the runs that fail to write (a file-size
limit, a full tmpfs, an unwritable directory) go through the CLI's `main` in the test's
process, each on its own copy of one finished 10-step run."""

from __future__ import annotations

import errno
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_here
from tests.train.conftest import FAST, read_json
from tfyard.cli import main

PROGRAM = Path(__file__).parent / "programs" / "save_forever.py"
FLAGS = ["train", *FAST, "--no_export", "--eval_every_epochs", "100"]


def restore(directory: Path):
    import tensorflow as tf

    from tfyard.train.rundir.checkpoint import Checkpoints

    values = tf.Variable(tf.zeros([4_000_000]))
    step = tf.Variable(0, dtype=tf.int64)
    path = Checkpoints(str(directory), True, 3, values=values, step=step).restore_latest()
    return path, int(step.numpy()), values.numpy()


@pytest.mark.slow
def test_kill_at_many_points_inside_save_never_breaks_the_latest_checkpoint(tmp_path):
    """Six kill points, each a fresh saver process SIGKILLed at a random moment after its
    first save (programs/save_forever.py forks them from one process that imported
    TensorFlow and ran nothing yet, so a point costs no import)."""
    rng = random.Random(7)
    last_step = 0
    saver = subprocess.Popen([sys.executable, str(PROGRAM), str(tmp_path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(6):
            saver.stdin.write("next\n")
            saver.stdin.flush()
            pid = int(saver.stdout.readline())
            first = int(saver.stdout.readline())      # one save finished in this process
            time.sleep(rng.uniform(0.0, 1.5))         # ...then die somewhere in a later one
            os.kill(pid, signal.SIGKILL)
            ended = next(line for line in saver.stdout if line.startswith("ended"))
            assert ended.split() == ["ended", str(-signal.SIGKILL)], ended
            path, step, values = restore(tmp_path)
            assert path.endswith(f"ckpt-{step}") and step >= first > last_step
            np.testing.assert_array_equal(values, np.full(4_000_000, step, np.float32))
            last_step = step
    finally:
        saver.kill()
        saver.communicate()


@pytest.fixture(scope="module")
def ten_steps(tmp_path_factory, digits_work) -> Path:
    """A finished 10-step run (its latest checkpoint ckpt-10); each test copies it."""
    out = tmp_path_factory.mktemp("ten-steps") / "out"
    assert main(list(map(str, [*FLAGS, "--output_dir", out, "--work_dir", digits_work,
                               "--train_steps", "10"]))) == 0
    return out


def train_on(capsys, out: Path, work: Path, steps: int):
    return run_here(capsys, *FLAGS, "--output_dir", out, "--work_dir", work, "--train_steps",
                    steps)


def test_full_disk_is_one_clear_error_and_earlier_checkpoints_survive(tmp_path, ten_steps,
                                                                      digits_work, capsys):
    out = tmp_path / "out"
    shutil.copytree(ten_steps, out)
    # No file of this process may grow past 300 KB (a checkpoint is larger): writes past it
    # fail with EFBIG, as on a full disk. The hard limit stays, so the soft one comes back.
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, limit[1]))
    try:
        full = train_on(capsys, out, digits_work, 20)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, previous)
    assert full.returncode == 2, full.stderr[-2000:]
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith("tfyard: error: cannot write checkpoint at step 20")
    assert "earlier checkpoints are untouched" in last and "Traceback" not in full.stderr
    state = (out / "checkpoints" / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-10"' in state
    evaluated = run_here(capsys, "evaluate", "--output_dir", out)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert read_json(out / "summary.json")["final_step"] == 10


@pytest.fixture
def small_filesystem(tmp_path):
    """A 64 MB tmpfs at tmp_path/out (needs root); skipped where it cannot be mounted."""
    mount = tmp_path / "out"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot mount a small filesystem here ({made.stderr.strip()})")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_filesystem_names_the_os_reason_leaves_no_temporaries_and_resumes(
        small_filesystem, ten_steps, digits_work, capsys):
    out = small_filesystem
    shutil.copytree(ten_steps, out, dirs_exist_ok=True)
    free = os.statvfs(out).f_bavail * os.statvfs(out).f_frsize
    filler = out / "filler"
    with open(filler, "wb") as handle:             # leave ~64 KB: less than a checkpoint
        handle.truncate(0)
        handle.write(b"\0" * (free - 64 * 1024))
    full = train_on(capsys, out, digits_work, 20)
    assert full.returncode == 2, full.stderr[-2000:]
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith("tfyard: error: cannot write") and "No space left on device" in last, \
        full.stderr[-2000:]
    assert "{{" not in last and "SaveV2" not in last and "Traceback" not in full.stderr
    assert not list(out.rglob("*_temp*")) and not list(out.rglob("*.tmp*")), \
        sorted(map(str, out.rglob("*")))
    assert 'model_checkpoint_path: "ckpt-10"' in (out / "checkpoints" / "checkpoint").read_text()
    assert read_json(out / "summary.json")["final_step"] == 10
    filler.unlink()                                # space freed: the rerun resumes
    rerun = train_on(capsys, out, digits_work, 20)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    summary = read_json(out / "summary.json")
    assert (summary["resumed_from_step"], summary["final_step"]) == (10, 20)


def mount(*args) -> int:
    return subprocess.run(["mount", *args], capture_output=True).returncode


@pytest.fixture(params=[errno.EACCES, errno.EROFS], ids=errno.errorcode.get)
def unwritable(request, tmp_path_factory):
    """Makes directories unwritable: chmod 500 (EACCES) or a read-only bind mount onto
    itself (EROFS). Tried on a scratch directory first: skipped where that does not fail
    (root ignores permissions) or cannot be made (mounting needs privileges)."""
    undo = []

    def make(directory: Path) -> str:
        """Make `directory` unwritable; the OS's words for a write there now."""
        if request.param == errno.EACCES:
            directory.chmod(0o500)
            undo.append(lambda: directory.chmod(0o700))
        else:
            if mount("--bind", directory, directory):
                pytest.skip("cannot bind-mount a directory here")
            undo.append(lambda: subprocess.run(["umount", "-l", directory], check=False))
            if mount("-o", "remount,bind,ro", directory):
                pytest.skip("cannot remount a directory read-only here")
        return os.strerror(request.param)

    try:
        scratch = tmp_path_factory.mktemp("scratch")
        make(scratch)
        try:
            (scratch / "probe").touch()
        except OSError as exc:
            assert exc.errno == request.param
        else:
            pytest.skip("a chmod 500 directory is writable for this user (root)")
        yield make
    finally:
        for step in reversed(undo):
            step()


def test_an_unwritable_checkpoint_dir_names_the_os_reason(unwritable, tmp_path, ten_steps,
                                                           digits_work, capsys):
    out = tmp_path / "out"
    shutil.copytree(ten_steps, out)
    reason = unwritable(out / "checkpoints")
    failed = train_on(capsys, out, digits_work, 20)
    assert failed.returncode == 2, failed.stderr[-2000:]
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("tfyard: error: cannot write checkpoint at step 20") and \
        f"({reason})" in last, failed.stderr[-2000:]
    assert "{{" not in last and "SaveV2" not in last and "Traceback" not in failed.stderr
    state = (out / "checkpoints" / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-10"' in state
    assert read_json(out / "summary.json")["final_step"] == 10
