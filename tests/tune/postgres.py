"""A real PostgreSQL server on 127.0.0.1 for the studies shared through a database: Debian's
`postgresql` package (`.ci/run` installs it where it is missing), a cluster made for the test
run, run as the `postgres` user when the tests run as root (PostgreSQL refuses root)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tfyard.launch.ports import reserve_port

USER, PASSWORD = "tfyard", "pg-s3cret"
START_S = 60.0


def server(directory: Path) -> tuple[str, int]:
    """Start one: its URL (database `tune`) and the id of its process group. Its cluster
    lives in a folder of its own under the system's temp dir, which the `postgres` user can
    reach (pytest's own is its runner's alone); `directory` gets its log."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.skip("no PostgreSQL server here (Debian's postgresql package; .ci/run "
                    "installs it)")
    bin_dir = os.path.dirname(found[-1])
    home = Path(tempfile.mkdtemp(prefix="tfyard-pg-"))
    owner = {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}
    password = home / "password"
    password.write_text(PASSWORD)
    if owner:
        for path in (home, password):
            shutil.chown(path, "postgres", "postgres")
    subprocess.run([f"{bin_dir}/initdb", "-D", str(home / "cluster"), "-U", USER,
                    "--auth=scram-sha-256", f"--pwfile={password}", "-E", "UTF8", "--no-sync"],
                   check=True, capture_output=True, **owner)
    with contextlib.closing(reserve_port()) as held:
        port = held.getsockname()[1]
    with open(directory / "postgres.log", "w") as log:
        proc = subprocess.Popen(
            [f"{bin_dir}/postgres", "-D", str(home / "cluster"), "-h", "127.0.0.1", "-p",
             str(port), "-k", str(home), "-c", "fsync=off"], stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, **owner)
    url = f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}"
    _create_database(url, proc, directory / "postgres.log")
    return f"{url}/tune", proc.pid


def _create_database(url: str, proc: subprocess.Popen, log: Path) -> None:
    import psycopg

    deadline = time.monotonic() + START_S
    while True:
        try:
            with psycopg.connect(f"{url}/postgres", autocommit=True) as connection:
                connection.execute("CREATE DATABASE tune")
            return
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"PostgreSQL did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.2)


@contextlib.contextmanager
def running(directory: Path):
    """A server for this process alone, stopped at the block's end."""
    url, group = server(directory)
    try:
        yield url
    finally:
        os.killpg(group, signal.SIGINT)   # PostgreSQL's fast shutdown
        with contextlib.suppress(ChildProcessError):
            os.waitpid(group, 0)
