"""A server the benchmarks start on 127.0.0.1 (an object store, a tracking server): it shares
this machine's cores, as a server on the same node would."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(command: list[str], port: int, env: dict | None = None
          ) -> tuple[subprocess.Popen, str]:
    """`command` started (`env` added to this environment), once it listens on the loopback
    `port`: the process and its URL."""
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, **(env or {})}, start_new_session=True)
    for _ in range(1200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    stop(server)
    raise RuntimeError(f"{command[2]} did not start")


def stop(server: subprocess.Popen) -> None:
    """The server and its workers (gunicorn's, say, outlive their parent)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)
