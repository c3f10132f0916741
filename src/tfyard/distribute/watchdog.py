"""A separate process that ends a cluster member which waits too long for its peers.

While TensorFlow waits for peers that never start it blocks in C++ holding the GIL and
ignoring SIGTERM, so nothing inside the process can act (`gather` waits first, in Python,
where a signal still ends the member; a peer may still go between). The watchdog child
waits on a pipe: when the member says the cluster has formed (or exits), the pipe closes and the
child leaves quietly; when time runs out first, it names the addresses that do not
answer, then SIGKILLs the member.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys

from tfyard.distribute.cluster import ClusterConfig
from tfyard.distribute.gather import peers
from tfyard.distribute.server import reachable


class StartupWatchdog:
    def __init__(self, cluster: ClusterConfig, timeout: float):
        self.cluster = cluster
        self.timeout = timeout
        self._child: subprocess.Popen | None = None

    def start(self) -> StartupWatchdog:
        if not self.cluster.jobs:
            return self
        me = f"{self.cluster.role}:{self.cluster.task_index}"
        self._child = subprocess.Popen(
            [sys.executable, "-m", "tfyard.distribute.watchdog", str(os.getpid()),
             str(self.timeout), me, json.dumps(peers(self.cluster))],
            stdin=subprocess.PIPE, start_new_session=True)
        return self

    def stop(self) -> None:
        if self._child is not None:
            self._child.stdin.close()
            self._child.wait()
            self._child = None


def main(argv: list[str]) -> int:
    pid, timeout, me, peers = int(argv[0]), float(argv[1]), argv[2], json.loads(argv[3])
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    if ready:
        return 0
    missing = [f"{name} at {address}" for name, address in peers if not reachable(address)]
    who = ", ".join(missing) or "a member (every address answers)"
    sys.stderr.write(f"tfyard: error: {me} gave up after {timeout:.0f}s waiting for {who}; "
                     "start the missing member(s) or raise --startup_timeout\n")
    sys.stderr.flush()
    os.kill(pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
