"""The local launcher listens on loopback only, and tells its members only loopback addresses."""

from __future__ import annotations

import json
import socket
import sys

from tests.conftest import run_tfyard
from tfyard.launch.ports import reserved_ports

SHOW_TF_CONFIG = "import os; print('TF_CONFIG=' + os.environ['TF_CONFIG'])"


def free_elsewhere(port: int) -> bool:
    """Whether `port` can still be bound on another loopback address (127.0.0.2): true
    only when the reservation holds 127.0.0.1 and not every interface."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.2", port))
        except OSError:
            return False
    return True


def test_reserved_ports_bind_loopback_only():
    with reserved_ports(3) as ports:
        assert len(set(ports)) == 3
        assert all(free_elsewhere(port) for port in ports)
    with socket.socket() as everywhere:           # the probe does tell the difference
        everywhere.bind(("0.0.0.0", 0))
        assert not free_elsewhere(everywhere.getsockname()[1])


def test_launched_members_only_get_loopback_addresses():
    result = run_tfyard("launch", "local", "--chief", "--workers", "2", "--ps", "1", "--grace",
                        "1", "--", sys.executable, "-c", SHOW_TF_CONFIG, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    configs = [json.loads(line.split("TF_CONFIG=", 1)[1])
               for line in result.stdout.splitlines() if "TF_CONFIG=" in line]
    assert len(configs) == 4
    for config in configs:
        for addresses in config["cluster"].values():
            assert all(address.startswith("127.0.0.1:") for address in addresses)
