"""The other all-reduce members awaited in Python, before TensorFlow forms the cluster.

TensorFlow's own wait for its peers (MultiWorkerMirrored's cluster registration) blocks in
C++ holding the GIL, and its coordination service takes SIGTERM over first, so a member
signalled there ran on until --startup_timeout. So a member first holds its own port
(listening, never accepting: all a peer's probe needs) and waits until every peer answers
at its address; SIGTERM or SIGINT meanwhile ends it at once in one line naming whom it
waited for, exit 143 or 130. TensorFlow then forms a cluster whose members are all up.
The watchdog (`distribute.watchdog`) still bounds the whole start.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading

from tfyard.distribute.cluster import ClusterConfig
from tfyard.distribute.server import reachable

POLL_S = 0.2


def peers(cluster: ClusterConfig) -> list[tuple[str, str]]:
    """(name, address) of every training member but this one: [("worker:1", "h:p"), ...]."""
    return [(f"{job}:{index}", address)
            for job, addresses in cluster.training_jobs.items()
            for index, address in enumerate(addresses) if address != cluster.address]


def gather(cluster: ClusterConfig, poll: float = POLL_S) -> None:
    """Return once every peer answers; a signal first ends the process (main thread only:
    elsewhere, or when this member's port cannot be held, TensorFlow waits as before)."""
    waiting = peers(cluster)
    if not waiting or threading.current_thread() is not threading.main_thread():
        return
    with _held(cluster.address) as held, _signals() as got:
        if not held:
            return
        while waiting := [(name, address) for name, address in waiting
                          if not reachable(address)]:
            if got.wait(poll):
                signum = got.signum
                who = ", ".join(f"{name} ({address})" for name, address in waiting)
                print(f"tfyard: {cluster.role}:{cluster.task_index} got "
                      f"{signal.Signals(signum).name} while waiting for {who} to start; "
                      f"stopped (exit {128 + signum})", file=sys.stderr, flush=True)
                raise SystemExit(128 + signum)


@contextlib.contextmanager
def _held(address: str):
    """This member's port held listening while it waits (True), or False if it is taken.
    SO_REUSEPORT, as the launchers' reservations (`launch.ports`) and gRPC set it."""
    port = int(address.rpartition(":")[2])
    dual = socket.has_dualstack_ipv6()
    try:
        sock = socket.create_server(("", port), family=socket.AF_INET6 if dual
                                    else socket.AF_INET, dualstack_ipv6=dual, reuse_port=True)
    except OSError:
        yield False
        return
    with sock:
        yield True


class _Signalled(threading.Event):
    signum = 0


@contextlib.contextmanager
def _signals():
    """SIGTERM and SIGINT set the event yielded (its `signum` the signal) rather than act;
    the handlers before are put back after."""
    got = _Signalled()

    def handler(signum, _frame):
        got.signum = signum
        got.set()

    kinds = (signal.SIGTERM, signal.SIGINT)
    before = {kind: signal.signal(kind, handler) for kind in kinds}
    try:
        yield got
    finally:
        for kind, previous in before.items():
            signal.signal(kind, signal.SIG_DFL if previous is None else previous)
