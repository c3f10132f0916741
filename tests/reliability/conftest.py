"""Helpers for fault tests: start a launched job, find a member's process, kill it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.train.conftest import FAST


def start_job(output_dir: Path, work_dir: Path, layout: list[str], *train_flags,
              max_restarts: int = 1) -> subprocess.Popen:
    """`tfyard launch local LAYOUT --max_restarts K -- tfyard train ...`, output captured."""
    train = [sys.executable, "-m", "tfyard", "train", *FAST, "--output_dir", output_dir,
             "--work_dir", work_dir, "--no_export", *train_flags]
    command = [sys.executable, "-m", "tfyard", "launch", "local", *layout, "--max_restarts",
               str(max_restarts), "--grace", "3", "--", *train]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(list(map(str, command)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return 0


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = _parent(pid)
    return False


def member_pid(launcher: int, task_type: str, index: int) -> int | None:
    """The pid of launcher's `tfyard train` process running as task_type:index."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:   # a `train` first: one read for most processes, the ancestry walk for few
            if b"train" not in (entry / "cmdline").read_bytes().split(b"\0") \
                    or not _descends_from(int(entry.name), launcher):
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"TF_CONFIG="):
                task = json.loads(item[len(b"TF_CONFIG="):])["task"]
                if (task["type"], task["index"]) == (task_type, index):
                    return int(entry.name)
    return None


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def latest_checkpoint_step(output_dir: Path) -> int:
    state = output_dir / "checkpoints" / "checkpoint"
    if not state.exists():
        return 0
    for line in state.read_text().splitlines():
        if line.startswith("model_checkpoint_path:"):
            return int(line.split("ckpt-")[1].strip('"'))
    return 0
