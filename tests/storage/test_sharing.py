"""Members reading one prefix into one work dir: a joining member waits for the bytes the
others reserved (downloads begun, not yet on disk), not only for their files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import tfyard
from tfyard.storage import sharing

JOINER = """
import json, sys, time
from tfyard.storage import sharing
root = sharing.claimed(sys.argv[1])
started = time.time()
sharing.wait_for_room(root, 1000)
print(json.dumps({"root": root, "started": started, "ended": time.time()}))
"""


def test_a_joining_member_waits_for_the_downloads_another_reserved(tmp_path):
    base = str(tmp_path / "set")
    root = sharing.claimed(base)
    sharing.reserve(root, 5000)   # downloading 5000 bytes; none on disk yet
    assert sharing.disk_used(root) == 0 and sharing.reserved(root) == 5000
    fell = []

    def trimmed() -> None:   # its part, once it trims
        sharing.reserve(root, 800)
        fell.append(time.time())

    threading.Timer(2.0, trimmed).start()   # after the joiner has started, even on a busy host
    joined = subprocess.run(
        [sys.executable, "-c", JOINER, base], capture_output=True, text=True, timeout=60,
        check=True, env={**os.environ, "PYTHONPATH": str(Path(tfyard.__file__).parents[1])})
    said = json.loads(joined.stdout)
    assert said["root"] == f"{base}.1"
    if said["started"] < fell[0]:   # it came before the reservation fell: it waited for it
        assert fell[0] <= said["ended"] < said["started"] + sharing.JOIN_WAIT, (said, fell)


def test_a_claimed_root_starts_with_no_reservation(tmp_path):
    base = tmp_path / "set"
    (tmp_path / f"set{sharing.LOCK}").write_text("123456")   # a dead reader's, left behind
    root = sharing.claimed(str(base))
    assert root == str(base) and sharing.reserved(root) == 0
    assert sharing.disk_used(str(tmp_path)) == 0   # the locks are not data
