"""A checkpoint cut short, or a disk that fills up, never costs the previous checkpoint."""

from __future__ import annotations

import errno
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_tfyard
from tests.train.conftest import FAST, read_json

PROGRAM = Path(__file__).parent / "programs" / "save_forever.py"


def restore(directory: Path):
    import tensorflow as tf

    from tfyard.train.rundir.checkpoint import Checkpoints

    values = tf.Variable(tf.zeros([4_000_000]))
    step = tf.Variable(0, dtype=tf.int64)
    path = Checkpoints(str(directory), True, 3, values=values, step=step).restore_latest()
    return path, int(step.numpy()), values.numpy()


@pytest.mark.slow
def test_kill_at_many_points_inside_save_never_breaks_the_latest_checkpoint(tmp_path):
    rng = random.Random(7)
    last_step = 0
    for _ in range(4):
        proc = subprocess.Popen([sys.executable, str(PROGRAM), str(tmp_path)],
                                stdout=subprocess.PIPE, text=True)
        first = int(proc.stdout.readline())           # one save finished in this process
        time.sleep(rng.uniform(0.0, 1.5))             # ...then die somewhere in a later one
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        path, step, values = restore(tmp_path)
        assert path.endswith(f"ckpt-{step}") and step >= first > last_step
        np.testing.assert_array_equal(values, np.full(4_000_000, step, np.float32))
        last_step = step


def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))


def test_full_disk_is_one_clear_error_and_earlier_checkpoints_survive(tmp_path, digits_work):
    flags = ["train", *FAST, "--output_dir", tmp_path, "--work_dir", digits_work,
             "--no_export"]
    first = run_tfyard(*flags, "--train_steps", "10")
    assert first.returncode == 0, first.stderr[-2000:]
    command = [sys.executable, "-m", "tfyard", *map(str, flags), "--train_steps", "20"]
    full = subprocess.run(command, capture_output=True, text=True, preexec_fn=_limit_file_size)
    assert full.returncode == 2
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith("tfyard: error: cannot write checkpoint at step 20")
    assert "earlier checkpoints are untouched" in last and "Traceback" not in full.stderr
    state = (tmp_path / "checkpoints" / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-10"' in state
    evaluated = run_tfyard("evaluate", "--output_dir", tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert read_json(tmp_path / "summary.json")["final_step"] == 10


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
        small_filesystem, digits_work):
    out = small_filesystem
    flags = ["train", *FAST, "--output_dir", out, "--work_dir", digits_work, "--no_export",
             "--eval_every_epochs", "100"]
    first = run_tfyard(*flags, "--train_steps", "10")
    assert first.returncode == 0, first.stderr[-2000:]
    free = os.statvfs(out).f_bavail * os.statvfs(out).f_frsize
    filler = out / "filler"
    with open(filler, "wb") as handle:             # leave ~64 KB: less than a checkpoint
        handle.truncate(0)
        handle.write(b"\0" * (free - 64 * 1024))
    full = run_tfyard(*flags, "--train_steps", "20")
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
    rerun = run_tfyard(*flags, "--train_steps", "20")
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


def test_an_unwritable_checkpoint_dir_names_the_os_reason(unwritable, tmp_path, digits_work):
    flags = ["train", *FAST, "--output_dir", tmp_path, "--work_dir", digits_work, "--no_export",
             "--eval_every_epochs", "100"]
    first = run_tfyard(*flags, "--train_steps", "10")
    assert first.returncode == 0, first.stderr[-2000:]
    reason = unwritable(tmp_path / "checkpoints")
    failed = run_tfyard(*flags, "--train_steps", "20")
    assert failed.returncode == 2, failed.stderr[-2000:]
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("tfyard: error: cannot write checkpoint at step 20") and \
        f"({reason})" in last, failed.stderr[-2000:]
    assert "{{" not in last and "SaveV2" not in last and "Traceback" not in failed.stderr
    state = (tmp_path / "checkpoints" / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-10"' in state
    assert read_json(tmp_path / "summary.json")["final_step"] == 10
