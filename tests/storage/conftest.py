"""Real object-store servers for the storage tests, on 127.0.0.1: moto's server mode for the
S3 protocol, reached through the standard AWS settings (`AWS_ENDPOINT_URL_S3`, the credential
variables), and gcp-storage-emulator for GCS's JSON API, through `STORAGE_EMULATOR_HOST`."""

from __future__ import annotations

import contextlib
import os
import signal
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
    with serving([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                 port, env) as url:
        yield url


def start_server(command: list[str], port: int, env=None) -> subprocess.Popen:
    """The server `command` started in a session of its own, once it listens on the loopback
    `port`."""
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, **(env or {})}, start_new_session=True)
    deadline = time.monotonic() + 180   # a loaded machine starts an MLflow server slowly
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, \
                f"{command} did not start"
            time.sleep(0.1)


@contextlib.contextmanager
def serving(command: list[str], port: int, env=None, stop: int = signal.SIGTERM):
    """The server `command` started, listening on the loopback `port`, its URL while the
    block runs; then `stop` sent to its process group."""
    server = start_server(command, port, env)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:   # the whole group: a server's workers (gunicorn's, say) outlive their parent
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, stop)
        server.wait(timeout=30)


@pytest.fixture(scope="session")
def s3_endpoint():
    """One S3 server for a session's tests (each module's buckets named apart)."""
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


@pytest.fixture(scope="session")
def gcs_endpoint():
    """One GCS JSON-API server for a session's tests (objects kept in memory, each module's
    buckets named apart)."""
    pytest.importorskip("gcp_storage_emulator")
    port = free_port()
    with serving([sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                  "--port", str(port), "--in-memory"], port) as url:
        yield url


@pytest.fixture
def gcs(gcs_endpoint, monkeypatch, tmp_path):
    """The test's Google settings point at the server (no others, and the default copy of
    bucket data under the test's folder); returns a google-cloud-storage client of it."""
    from google.cloud import storage

    for name in [n for n in os.environ if n.startswith(("GOOGLE_", "CLOUDSDK_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint)
    return storage.Client()


def gcs_upload(client, local: Path, bucket: str, prefix: str) -> None:
    """Every file under `local` as an object under `prefix`, the bucket made if needed."""
    if client.lookup_bucket(bucket) is None:
        client.create_bucket(bucket)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.bucket(bucket).blob(f"{prefix}/{path.relative_to(local)}").upload_from_filename(
            str(path))


def upload(client, local: Path, bucket: str, prefix: str) -> None:
    """Every file under `local` as an object under `prefix`, the bucket made if needed."""
    if bucket not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket=bucket)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local)}")


def refused(argv, capsys) -> str:
    """The one line `tfyard ARGV` (in-process) is refused with; it names no credentials."""
    from tfyard.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and SECRET not in err, err
    return err


def train_on(url: str, output_dir: str) -> list[str]:
    """`tfyard train` on the CIFAR-10 data at `url`: what the fault tests point at a bucket."""
    return ["train", "--dataset", "cifar10", "--data_dir", url, "--num_gpus", "0",
            "--output_dir", output_dir]


def two_files(root: Path) -> Path:
    """A folder of two files, one nested, to copy through a bucket."""
    (root / "nested").mkdir(parents=True)
    (root / "a.bin").write_bytes(b"a" * 1000)
    (root / "nested" / "b.bin").write_bytes(b"b" * 10)
    return root


def refuses_bad_data_urls(scheme: str, invalid_bucket: str, output_dir: str, capsys) -> None:
    """The --data_dir faults every store answers alike, each one line: a missing bucket, an
    empty prefix (bucket `faults` must exist), and two malformed URLs."""
    assert "no such bucket" in refused(train_on(f"{scheme}://no-bucket-here/cifar",
                                                output_dir), capsys)
    assert "no files under this prefix" in refused(train_on(f"{scheme}://faults/empty",
                                                            output_dir), capsys)
    for url in (f"{scheme}://{invalid_bucket}/x", f"{scheme}://"):
        assert f"is not a valid {scheme}:// URL" in refused(train_on(url, output_dir), capsys)

