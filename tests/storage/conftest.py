"""A real S3-protocol server for the storage tests: moto's server mode on 127.0.0.1, reached
through the standard AWS settings (`AWS_ENDPOINT_URL_S3`, the credential variables)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Credentials the server accepts; the secret is distinctive, so a test can check that it
# never appears in an output.
SECRET = "tfyard-test-secret-0d9b1e"
SETTINGS = {"AWS_ACCESS_KEY_ID": "tfyard-test-key", "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def moto_server(**env):
    """`python -m moto.server` on a free loopback port (with `env` added to its own), its
    URL while the block runs."""
    pytest.importorskip("moto.server")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, **env})
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "moto did not start"
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def s3_endpoint():
    """An S3 server for a module's tests."""
    with moto_server() as url:
        yield url


@pytest.fixture
def s3(s3_endpoint, monkeypatch, tmp_path):
    """The test's AWS settings point at the server (and the default copy of bucket data is
    under the test's folder); returns a boto3 client of it."""
    import boto3

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name, value in {**SETTINGS, "AWS_ENDPOINT_URL_S3": s3_endpoint}.items():
        monkeypatch.setenv(name, value)
    return boto3.client("s3")


def upload(client, local: Path, bucket: str, prefix: str) -> None:
    """Every file under `local` as an object under `prefix`, the bucket made if needed."""
    if bucket not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=bucket)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local)}")
