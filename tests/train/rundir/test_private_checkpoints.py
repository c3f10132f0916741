"""A member that writes no files saves to a private folder in the system's temporary
directory; what killed members left there is removed by the next one, and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from tfyard.train.rundir.checkpoint import ABANDONED_SECONDS, PRIVATE, private_directory


def test_only_folders_of_gone_processes_untouched_for_an_hour_are_removed(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    old = time.time() - ABANDONED_SECONDS - 60
    folders = {"gone, old": f"{PRIVATE}{gone}-a", "gone, recent": f"{PRIVATE}{gone}-b",
               "alive, old": f"{PRIVATE}{os.getppid()}-c", "not ours": "tfyard-ckpt-notes"}
    for key, name in folders.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "ckpt-1.index").write_text("x")
        if "old" in key or key == "not ours":
            os.utime(tmp_path / name, (old, old))
    mine = private_directory()
    assert os.path.basename(mine).startswith(f"{PRIVATE}{os.getpid()}-")
    assert os.path.dirname(mine) == str(tmp_path)
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {os.path.basename(mine), *folders.values()} - {folders["gone, old"]}
