"""A parameter-server cluster's ps and PS workers: this task's gRPC server, served until the
chief has come and gone (a chief that went without its summary was lost: exit 75; SIGTERM:
143 once the chief has saved); and whether something listens at a member's address, which
the all-reduce members' end, the start-up watchdog and the port gathering ask too.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from tfyard.distribute.cluster import ClusterConfig
from tfyard.distribute.lost import lost_line
from tfyard.errors import LOST_PEER_EXIT_CODE, PREEMPTED, PREEMPTED_EXIT_CODE, UserError
from tfyard.process import envvars
from tfyard.runfiles.files import files_for

# Inter-op threads for servers: a PS task with fewer than a handful dead-locks on small machines.
MIN_INTER_OP_THREADS = 8
# A SIGTERMed ps / PS worker serves on while the chief is up, for at most this long.
SERVER_GRACE_ENV, SERVER_GRACE_S = "TFYARD_SERVER_GRACE", 20.0


def while_reachable(address: str, seconds: float, poll: float) -> None:
    """Wait until nothing listens at `address` (its process has ended), for at most
    `seconds`, looking every `poll` s."""
    ends = time.monotonic() + seconds
    while time.monotonic() < ends and reachable(address):
        time.sleep(poll)


def start_server(cluster: ClusterConfig):
    """Start this ps / worker task's gRPC server, with enough threads not to dead-lock."""
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(
        inter_op_parallelism_threads=max(MIN_INTER_OP_THREADS, os.cpu_count() or 1)
    )
    return tf.distribute.Server(
        tf.train.ClusterSpec(cluster.training_jobs),
        job_name=cluster.task_type,
        task_index=cluster.task_index,
        protocol=cluster.rpc_layer or "grpc",
        config=config,
        start=True,
    )


def reachable(address: str, timeout: float = 1.0) -> bool:
    """Whether something listens at host:port."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def serve(cluster: ClusterConfig, startup_timeout: float, poll: float = 1.0,
          chief_files: tuple[str, str, str] | None = None) -> int:
    """Run this task's server until the chief has come and gone; returns the exit status.

    Gives up, naming the chief's address, if the chief is not reachable within
    `startup_timeout` seconds, so a job whose chief never starts does not hang forever.
    SIGTERM (preemption) returns PREEMPTED_EXIT_CODE once the chief has ended, at most
    TFYARD_SERVER_GRACE s (default 20) later: the chief, signalled too when the whole job
    is preempted, still needs the variables (ps) and its running closures (workers) to save.
    `chief_files` are the chief's lease, run.json and summary.json: when this task saw the
    lease or run.json (the run directory is shared; the lease alone may come and go between
    two looks) and the chief went without writing its summary, the chief was lost: one line
    and LOST_PEER_EXIT_CODE, so a Kubernetes Job restarts this member with the chief instead
    of counting it done.
    """
    started, grace = time.time(), envvars.number(SERVER_GRACE_ENV, SERVER_GRACE_S)
    start_server(cluster)
    terminated = _sigterm_event()
    me, chief = f"{cluster.role}:{cluster.task_index}", cluster.jobs["chief"][0]
    print(f"tfyard: {me} serving at {cluster.address}; waiting for chief {chief}", flush=True)
    deadline = time.monotonic() + startup_timeout
    while not reachable(chief) and not terminated.is_set():
        if time.monotonic() > deadline:
            raise UserError(
                f"chief at {chief} did not come up within {startup_timeout:.0f}s; start it or "
                "raise --startup_timeout"
            )
        time.sleep(poll)
    def chief_writes_here() -> bool:
        return bool(chief_files) and any(files_for(path).has(path) for path in chief_files[:2])

    misses, shared = 0, False
    while misses < 3 and not terminated.is_set():
        time.sleep(poll)
        misses = 0 if reachable(chief) else misses + 1
        shared = shared or chief_writes_here()
    if not terminated.is_set():
        if (shared or chief_writes_here()) and not chief_finished(chief_files[2], started):
            print(lost_line(f"chief:0 ({chief})", f"before it finished; {me} stops"),
                  file=sys.stderr, flush=True)
            return LOST_PEER_EXIT_CODE
        print(f"tfyard: chief {chief} has ended; {me} stops", file=sys.stderr, flush=True)
        return 0
    while_reachable(chief, grace, poll / 4)
    print(f"tfyard: {me} got SIGTERM; stops (exit {PREEMPTED_EXIT_CODE}, safe to restart)",
          file=sys.stderr, flush=True)
    return PREEMPTED_EXIT_CODE


def chief_finished(summary: str, since: float) -> bool:
    """Whether the chief wrote its summary after `since`, other than a preemption's."""
    files = files_for(summary)
    try:
        if not files.has(summary) or files.modified(summary) < since:
            return False
        return json.loads(files.read_whole(summary)).get("stop_reason") != PREEMPTED
    except (OSError, ValueError, AttributeError):
        return False


def _sigterm_event():
    """An event SIGTERM sets, in place of dying at once (main thread only)."""
    import signal
    import threading

    event = threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda _signum, _frame: event.set())
    return event
