"""A real two-worker MultiWorkerMirrored job (`tfyard train` under `launch local`) whose
worker is SIGSTOPped: the other worker, blocked in the all-reduce, keeps beating
(TensorFlow releases the GIL in collectives), the stopped one does not, so the launcher
names it within --hang_timeout, kills it, and the job finishes from its checkpoint."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.reliability.conftest import latest_checkpoint_step, member_pid, start_job, wait_for
from tests.train.conftest import read_json

pytestmark = pytest.mark.cluster
HANG_TIMEOUT = 5  # below the 10 s after which TensorFlow itself gives up on a silent peer


def test_a_stopped_worker_is_named_within_the_timeout_and_the_job_finishes(tmp_path,
                                                                          digits_work):
    proc = start_job(tmp_path, digits_work,
                     ["--workers", "2", "--hang_timeout", str(HANG_TIMEOUT)],
                     "--train_steps", "40", "--checkpoint_every_steps", "10",
                     "--eval_every_epochs", "100")
    wait_for(lambda: latest_checkpoint_step(tmp_path) >= 10
             and member_pid(proc.pid, "worker", 1) is not None, proc)
    stopped_at_step = latest_checkpoint_step(tmp_path)
    victim = member_pid(proc.pid, "worker", 1)
    os.kill(victim, signal.SIGSTOP)
    stopped = time.monotonic()
    lines = []
    for line in proc.stdout:  # the launcher's own lines come as they happen
        lines.append(line)
        if "froze" in line:
            break
    found_after = time.monotonic() - stopped
    # read() and not communicate(): communicate polls the pipe itself and would lose what
    # the loop above has already buffered (the restart line often comes in the same read)
    output = "".join(lines) + proc.stdout.read()
    proc.wait(timeout=60)
    assert proc.returncode == 0, output[-4000:]
    assert re.search(rf"tfyard: worker:1 froze: no heartbeat for \d+s \(--hang_timeout "
                     rf"{HANG_TIMEOUT}\); killed it\ntfyard: restarting the job \(1/1\)\n",
                     output), output[-4000:]
    assert "worker:0 froze" not in output  # blocked in the all-reduce, yet beating
    assert HANG_TIMEOUT - 1 <= found_after <= HANG_TIMEOUT + 5, found_after
    summary = read_json(tmp_path / "summary.json")
    assert summary["final_step"] == 40
    assert stopped_at_step <= summary["resumed_from_step"] < 40
