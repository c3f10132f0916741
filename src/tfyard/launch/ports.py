"""Free loopback ports handed out without races.

Each port stays bound by a socket with SO_REUSEPORT until the member that will serve on
it has started: nobody else can take it meanwhile, and gRPC (which also sets
SO_REUSEPORT) can still bind it.
"""

from __future__ import annotations

import socket
from contextlib import contextmanager

LOOPBACK = "127.0.0.1"


def reserve_port(host: str = LOOPBACK) -> socket.socket:
    """A socket holding a free port on `host` (its getsockname()[1]) until it is closed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, 0))
    return sock


@contextmanager
def reserved_ports(count: int, host: str = LOOPBACK):
    """Yield `count` distinct free ports on `host`, held until the block exits."""
    sockets = []
    try:
        for _ in range(count):
            sockets.append(reserve_port(host))
        yield [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()
