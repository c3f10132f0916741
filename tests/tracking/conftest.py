"""A real MLflow tracking server for the tracking tests: `mlflow server` on 127.0.0.1 with a
SQLite store and a local artifact root, read back through MLflow's own client. The session's
one server, `mlflow_uri`, and `experiment` are fixtures of tests/conftest.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.storage.conftest import free_port, serving, start_server


def mlflow_command(root, port: int) -> list[str]:
    """`mlflow server` on the loopback `port`, keeping its runs under `root`."""
    return [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port",
            str(port), "--workers", "1", "--backend-store-uri", f"sqlite:///{root}/runs.db",
            "--artifacts-destination", str(root / "artifacts"),
            # the Default experiment's artifacts too (else `./mlruns`, which a client
            # resolves in its own working directory: the checkout)
            "--default-artifact-root", str(root / "artifacts")]


# MLflow 3's job runner (eight more processes, ~15 s of CPU to start) serves features tfyard
# never asks for
MLFLOW_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def until_it_answers(url: str) -> None:
    """Its port opens before its worker has imported MLflow's app (seconds, tens of seconds
    on a loaded machine): a request before then waits past a client's timeout."""
    wait_for(lambda: _answers(f"{url}/api/2.0/mlflow/experiments/get-by-name"
                              "?experiment_name=Default"), timeout=180)


@contextlib.contextmanager
def mlflow_server(root, port: int | None = None, stop: int = signal.SIGTERM):
    """`mlflow server` keeping its runs under `root` (a restart on the same `root` and
    `port` is the same server again); its URL while the block runs, then `stop` sent."""
    pytest.importorskip("mlflow.server")
    port = port or free_port()
    with serving(mlflow_command(root, port), port, MLFLOW_ENV, stop) as url:
        until_it_answers(url)
        yield url


def shared_mlflow_server(root) -> tuple[str, int]:
    """`mlflow server` under `root` for every xdist worker (`tests.shared_servers`): its URL
    and process group, once it answers."""
    pytest.importorskip("mlflow.server")
    port = free_port()
    server = start_server(mlflow_command(root, port), port, MLFLOW_ENV)
    url = f"http://127.0.0.1:{port}"
    try:
        until_it_answers(url)
    except BaseException:
        os.killpg(server.pid, signal.SIGTERM)
        raise
    return url, server.pid


def runs(uri: str, experiment: str) -> list:
    """The runs of `experiment`, read through MLflow's own client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    return [] if found is None else client.search_runs([found.experiment_id])


def steps(uri: str, run_id: str, key: str) -> list[int]:
    from mlflow.tracking import MlflowClient

    return sorted(m.step for m in MlflowClient(tracking_uri=uri).get_metric_history(run_id, key))


def tracked(uri: str, experiment: str) -> dict:
    """The environment that turns tracking on for a process."""
    return {**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": experiment}


def wait_for(condition, proc: subprocess.Popen | None = None, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        assert proc is None or proc.poll() is None, proc.communicate()[0][-3000:]
        time.sleep(0.05)


@contextlib.contextmanager
def model_server(model_uri: str, env: dict, log):
    """`mlflow models serve` of `model_uri` in this environment (`--env-manager local`) on
    127.0.0.1, its stderr written to `log`; its URL once it answers /ping."""
    port = free_port()
    with open(log, "wb") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri,
             "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
            env={**os.environ, **env})   # uvicorn beside this Python: tests/conftest.py
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 300   # TensorFlow's import and the model's load
            while not _answers(f"{url}/ping"):
                assert server.poll() is None and time.monotonic() < deadline, \
                    open(log).read()[-3000:]
                time.sleep(0.5)
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
