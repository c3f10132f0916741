"""The Tracker against a real `mlflow server`, in-process and without TensorFlow: a restart
continues its run and sends each step once, a server that cannot be used at the start is one
line in tfyard's words (or, optionally, untracked), MLflow's settings are as the user left
them once it ends, and what a server gone for good never took is counted."""

from __future__ import annotations

import logging
import os
import signal
import socket
import time

import pytest

from tests.storage.conftest import free_port
from tests.tracking.conftest import mlflow_server, runs, steps
from tfyard import tracking
from tfyard.errors import UserError

pytest.importorskip("mlflow")


def report(step: int, kind: str = "train") -> dict:
    return {"kind": kind, "step": step, "epoch": step / 10, "time": time.time(),
            "loss": 1.0 / step, "top1": step / 100}


def test_a_restart_continues_its_run_and_sends_each_step_once(mlflow_uri, experiment):
    from tfyard.tracking.mlflow_run import Tracker

    settings = tracking.settings(mlflow_uri, experiment)
    first = Tracker.start(settings, None, "net", {"model": "a", "steps": 20}, {}, [])
    for step in (5, 10):
        first.log(report(step))
    assert first.close("KILLED") == 0
    (run,) = runs(mlflow_uri, experiment)
    assert run.info.status == "KILLED" and run.info.run_name == "net"
    assert steps(mlflow_uri, run.info.run_id, "loss") == [5, 10]

    # metrics.jsonl holds step 15 too: reported, then killed before it was sent
    history = [report(5), report(10), report(15), report(10, "eval")]
    again = Tracker.start(settings, run.info.run_id, "net", {"model": "a", "steps": 40}, {},
                          history)
    assert again.run_id == run.info.run_id
    for step in (10, 15, 20):   # the steps after the restored checkpoint run again
        again.log(report(step))
    again.log(report(20, "eval"))
    assert again.close() == 0
    (run,) = runs(mlflow_uri, experiment)
    assert run.info.status == "FINISHED" and run.data.params == {"model": "a", "steps": "20"}
    assert steps(mlflow_uri, run.info.run_id, "loss") == [5, 10, 15, 20]
    assert steps(mlflow_uri, run.info.run_id, "eval_top1") == [10, 20]
    assert run.data.tags["tfyard.train_step"] == "20"

    other = Tracker.start(settings, "no-such-run-id", "other", {}, {}, [])
    assert other.run_id != run.info.run_id   # a run the server lacks: a new one
    other.close()


def test_a_server_that_cannot_be_used_at_the_start_is_one_line_or_untracked(caplog):
    from tfyard.tracking.mlflow_run import Tracker

    uri = f"http://127.0.0.1:{free_port()}"   # a closed loopback port
    started = time.monotonic()
    with pytest.raises(UserError) as refused:
        Tracker.start(tracking.settings(uri), None, "net", {}, {}, [])
    assert str(refused.value) == (
        f"MLflow at {uri} cannot be used: nothing answers there (connection refused); check "
        "that the server is running and that --mlflow_uri (or MLFLOW_TRACKING_URI) names its "
        "address, or pass --mlflow_optional to train untracked")
    with caplog.at_level(logging.WARNING, logger="tfyard"):
        assert Tracker.start(tracking.settings(uri, optional=True), None, "net", {}, {},
                             []) is None
    assert "training untracked (--mlflow_optional)" in caplog.text
    assert time.monotonic() - started < 30
    with pytest.raises(UserError, match="--register_model needs tracking on"):
        tracking.settings(None, register_model="net")


def test_a_server_that_never_answers_is_named_within_the_users_timeout(monkeypatch):
    from tfyard.tracking.mlflow_run import Tracker

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")   # the user's own, kept
    with socket.socket() as silent:      # takes connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(UserError, match=rf"^MLflow at {uri} cannot be used: it did not "
                                            r"answer within 2 s; check the server and the "
                                            "network"):
            Tracker.start(tracking.settings(uri), None, "net", {}, {}, [])
    assert time.monotonic() - started < 20


def test_mlflow_settings_are_as_the_user_left_them_after_a_tracker(mlflow_uri, experiment,
                                                                  monkeypatch):
    from tfyard.tracking.mlflow_run import Tracker

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "33")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    before = _settings()
    tracker = Tracker.start(tracking.settings(mlflow_uri, experiment), None, "net", {}, {}, [])
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"   # while it lives
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "33"
    tracker.close()
    assert _settings() == before
    with pytest.raises(UserError):
        Tracker.start(tracking.settings(f"http://127.0.0.1:{free_port()}"), None, "net", {},
                      {}, [])
    assert _settings() == before


def _settings() -> dict[str, str]:
    """The environment but MLflow's private `_MLFLOW_*` names: its client adds one (a
    telemetry session id) in the first process that uses it, whoever starts it."""
    return {k: v for k, v in os.environ.items() if not k.startswith("_MLFLOW_")}


def test_what_a_server_gone_for_good_never_took_is_counted(tmp_path, experiment, caplog,
                                                           monkeypatch):
    from tfyard.tracking import mlflow_run

    monkeypatch.setattr(mlflow_run, "FLUSH_S", 2.0)
    with mlflow_server(tmp_path, stop=signal.SIGKILL) as uri:   # killed mid-run
        tracker = mlflow_run.Tracker.start(tracking.settings(uri, experiment), None, "net", {},
                                           {}, [])
    for step in (5, 10, 15):
        tracker.log(report(step))
    with caplog.at_level(logging.WARNING, logger="tfyard"):
        assert tracker.close() == 6   # two values a report
    assert f"6 metrics not sent to MLflow at {uri}; they are in metrics.jsonl" in caplog.text
    assert caplog.text.count(f"MLflow at {uri} failed") == 1
    # the first request after the kill finds the port closed, or a kept-alive connection cut
    cause = caplog.text.split(f"MLflow at {uri} failed: ", 1)[1].split("; check that", 1)[0]
    assert cause in ("nothing answers there (connection refused)", "it dropped the connection")
    assert f"{cause}; check that the server is running" in caplog.text


def test_secrets_never_leave_the_uri_or_the_environment(monkeypatch):
    assert tracking.redacted("https://me:pw@mlflow.example/x?token=abc") == \
        "https://me:***@mlflow.example/x?token=***"
    assert tracking.redacted("https://tok@mlflow.example") == "https://***@mlflow.example"
    assert tracking.redacted("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert tracking.redacted("databricks") == "databricks"
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-123")
    assert tracking.scrubbed("sent tok-123 to https://me:pw@h", "https://me:pw@h") == \
        "sent *** to https://me:***@h"
