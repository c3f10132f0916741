"""The local launcher listens on loopback only, and tells its members only loopback addresses."""

from __future__ import annotations

import json
import sys

from tests.conftest import run_tfyard
from tfyard.launch.ports import reserved_ports

SHOW_TF_CONFIG = "import os; print('TF_CONFIG=' + os.environ['TF_CONFIG'])"


def bound_addresses(ports) -> set[str]:
    """Local IPv4 addresses (hex, as /proc/net/tcp writes them) bound on `ports`."""
    wanted = {f"{port:04X}" for port in ports}
    lines = open("/proc/net/tcp").read().splitlines()[1:]
    return {f.split(":")[0] for f in (line.split()[1] for line in lines)
            if f.split(":")[1] in wanted}


def test_reserved_ports_bind_loopback_only():
    with reserved_ports(3) as ports:
        assert len(set(ports)) == 3
        assert bound_addresses(ports) == {"0100007F"}  # 127.0.0.1


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
