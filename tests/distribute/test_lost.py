"""A lost peer is one line naming it (tfyard.distribute.lost); the real kills are in
tests/reliability/test_lost_members.py."""

from __future__ import annotations

import pytest
import tensorflow as tf

from tfyard.distribute.cluster import parse_tf_config
from tfyard.distribute.lost import lost_members, peer_loss
from tfyard.errors import LOST_PEER_EXIT_CODE

WORKERS = {"worker": ["127.0.0.1:2001", "127.0.0.1:2002"]}
# The survivor's error when worker:1 was SIGKILLed mid all-reduce (TensorFlow 2.21).
ABORTED = ("Graph execution error:\n\nDetected at node while/sgd/CollectiveReduceV2 defined "
           "at ...\nCollective ops is aborted by: recvmsg:Connection reset by peer\nAdditional "
           "GRPC error information from remote target /job:worker/replica:0/task:1 while "
           "calling /tensorflow.WorkerService/RecvBuf:\n:UNKNOWN:Error received from peer")


def config(cluster, job="worker", index=0):
    return parse_tf_config({"cluster": cluster, "task": {"type": job, "index": index}})


def test_the_lost_member_is_named_with_its_address_never_oneself():
    assert lost_members(ABORTED, config(WORKERS)) == ["worker:1 (127.0.0.1:2002)"]
    assert lost_members(ABORTED, config(WORKERS, index=1)) == []
    assert lost_members("/job:ps/replica:0/task:3 twice /job:ps/replica:0/task:3",
                        config(WORKERS)) == ["ps:3"]   # not in the cluster: no address


@pytest.mark.parametrize("error, strategy, cluster, said", [
    (tf.errors.UnavailableError(None, None, ABORTED), "multi_worker_mirrored", WORKERS,
     "lost worker:1 (127.0.0.1:2002) (UnavailableError) during all-reduce after step 20;"),
    (tf.errors.CancelledError(None, None, "Collective ops is aborted by: cancelled"),
     "multi_worker_mirrored", WORKERS,
     "lost an all-reduce peer (CancelledError) during all-reduce after step 20;"),
    (tf.errors.UnavailableError(None, None, "failed to connect; from remote target "
                                "/job:ps/replica:0/task:0 while calling Enqueue"),
     "parameter_server", {"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3"]},
     "lost ps:0 (h:2) (UnavailableError) (its variables are gone) after step 20;"),
])
def test_a_lost_peer_is_one_line_and_the_retryable_exit(capsys, error, strategy, cluster,
                                                         said):
    with pytest.raises(SystemExit) as exited, peer_loss(config(cluster, "chief" if "chief"
                                                                in cluster else "worker"),
                                                         strategy, lambda: 20):
        raise error
    assert exited.value.code == LOST_PEER_EXIT_CODE == 75
    err = capsys.readouterr().err
    assert err.startswith(f"tfyard: error: {said} the job must restart from the latest "
                          "checkpoint (exit 75"), err
    assert err.count("\n") == 1


def test_other_errors_and_single_processes_are_left_alone():
    with pytest.raises(tf.errors.InvalidArgumentError), \
            peer_loss(config(WORKERS), "multi_worker_mirrored", lambda: 0):
        raise tf.errors.InvalidArgumentError(None, None, "labels out of range")
    with pytest.raises(tf.errors.AbortedError), \
            peer_loss(config(WORKERS), "multi_worker_mirrored", lambda: 0):  # no peer named
        raise tf.errors.AbortedError(None, None, "gs://b/x: failed to connect to storage")
    with pytest.raises(tf.errors.UnavailableError), \
            peer_loss(parse_tf_config(None), "one_device", lambda: 0):
        raise tf.errors.UnavailableError(None, None, ABORTED)


def test_a_chief_that_left_without_its_summary_was_lost(tmp_path):
    import json
    import time

    from tfyard.distribute.server import chief_finished

    summary, since = tmp_path / "summary.json", time.time() - 1
    assert not chief_finished(str(summary), since)                  # none written
    summary.write_text(json.dumps({"stop_reason": None}))
    assert chief_finished(str(summary), since)                      # finished
    assert not chief_finished(str(summary), time.time() + 5)        # an earlier run's
    summary.write_text(json.dumps({"stop_reason": "preempted"}))
    assert not chief_finished(str(summary), since)                  # preempted: restarts
    summary.write_text("{torn")
    assert not chief_finished(str(summary), since)


def test_the_coordinators_closure_failures_are_one_line_per_worker(capsys):
    import logging

    from tfyard.distribute.lost import CoordinatorLines

    lines, error = CoordinatorLines(), tf.errors.UnavailableError(None, None, "Socket closed")
    said = [("Remote function on worker %s failed with %r:%s\nIt is treated as a transient "
             "connectivity failure for now.", ("/job:worker/replica:0/task:0/device:CPU:0",
                                                error, "20 lines\nof op text")),
            (" %s encountered the following error when processing closure: %r:%s",
             ("/job:worker/task:0", error, "op text")),
            ("Start cancelling closures due to error %r: %s", (error, "op text"))]
    kept = []
    for message, args in said * 2:
        record = logging.LogRecord("tensorflow", logging.ERROR, "/tf/distribute/coordinator/"
                                   "cluster_coordinator.py", 1, message, args, None)
        kept.append(lines.filter(record))
    other = logging.LogRecord("tensorflow", logging.ERROR, "/tf/other.py", 1, "mine", (), None)
    assert kept == [False] * 6 and lines.filter(other)
    assert capsys.readouterr().err == ("tfyard: warning: a step failed on worker:0 "
                                       "(UnavailableError); the coordinator runs it again\n")


SERVE = """
import socket, sys, threading
import tensorflow   # loaded first: the chief's 3 s below are the server's start and the wait
from tfyard.distribute.cluster import parse_tf_config
from tfyard.distribute.server import serve

lease, run, summary, finishes = sys.argv[1:]
chief = socket.create_server(("127.0.0.1", 0))   # listening is reachable enough
ps = socket.create_server(("127.0.0.1", 0))
worker_port = ps.getsockname()[1]
ps.close()
cluster = parse_tf_config({"cluster": {"chief": [f"127.0.0.1:{chief.getsockname()[1]}"],
                                       "ps": ["127.0.0.1:1"],
                                       "worker": [f"127.0.0.1:{worker_port}"]},
                           "task": {"type": "worker", "index": 0}})

def chief_ends():   # its lease released before this task looked
    if finishes == "yes":
        open(summary, "w").write('{"stop_reason": null}')
    chief.close()

threading.Timer(3.0, chief_ends).start()
sys.exit(serve(cluster, startup_timeout=30, poll=0.2, chief_files=(lease, run, summary)))
"""


@pytest.mark.parametrize("wrote_run, finishes, status", [
    (False, "no", 0), (True, "no", LOST_PEER_EXIT_CODE), (True, "yes", 0)])
def test_a_server_judges_the_chief_by_the_run_files_it_can_see(tmp_path, wrote_run, finishes,
                                                               status):
    """A private run directory: the chief just ended. A shared one (run.json seen, even with
    the lease released before this task looked): lost, unless it wrote its summary."""
    import subprocess
    import sys

    if wrote_run:
        (tmp_path / "run.json").write_text("{}")
    files = [str(tmp_path / name) for name in ("lease.json", "run.json", "summary.json")]
    proc = subprocess.run([sys.executable, "-c", SERVE, *files, finishes], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == status, proc.stderr[-2000:]
    assert ("lost chief:0" in proc.stderr) == (status == LOST_PEER_EXIT_CODE), proc.stderr
