"""The MLflow run of one training run, kept by the chief, never in the step's way.

- **One run across restarts.** run.json keeps the MLflow run's id; a resumed run continues it.
  Each request that sends metrics also sets the run's tags `tfyard.KIND_step` (train, eval,
  evaluate_validation, ...), the last step sent of each kind, in the same request: a restart sends
  what metrics.jsonl holds beyond them (what a kill left unsent) and drops the reports of the
  steps it runs again, so every step has one value.
- **Never slowed, never stopped.** `log` only appends to a bounded queue; a thread sends it
  in batches. A server that fails is retried with backoff and named once; what is still
  queued at the end, after FLUSH_S, is named in one line ("N metrics not sent; they are in
  metrics.jsonl"), and `tfyard track` sends it later. Only the start is strict: a server
  that cannot be used stops the run before step 1 in one line, unless the user chose
  `--mlflow_optional`.
"""

from __future__ import annotations

import logging
import os
import re
import time
from urllib.parse import urlsplit, urlunsplit

from tfyard.errors import UserError
from tfyard.process.sender import Bounded, Sender, Timing
from tfyard.tracking import Settings, environ_set, scrubbed
from tfyard.tracking.failures import said

log = logging.getLogger("tfyard")

QUEUE_MAX = 200_000   # metric values held while the server is away (~40 MB at most)
BATCH = 900           # values a request (MLflow takes 1,000 entries a log_batch)
PERIOD_S = 2.0        # how often the queue is sent
FLUSH_S = 30.0        # at the end: how long the queue may take to go
# a failure is retried after 4, 8, 16, then every 30 s; at the end every second
TIMING = Timing(period=PERIOD_S, backoff=2 * PERIOD_S, most_backoff=30.0, closing_retry=1.0)
PARAM_MAX = 6000      # MLflow's longest parameter value
STEP_TAG = re.compile(r"^tfyard\.(\w+)_step$")   # per kind of report: the last step sent
MODEL_TAG = "tfyard.model"   # set once the run's export is logged as its model
# MLflow's own settings, unless the user set them, while a Tracker lives (then put back as
# they were): its HTTP client retries a failed request 7 times with backoff (minutes), but
# the start check answers in seconds and the sending thread retries on its own; and ending
# a run prints its address on stdout. MLflow reads them from os.environ at each request.
DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
            "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}


def client(settings: Settings):
    """An MlflowClient of `settings.uri`; a UserError naming the extra when MLflow is absent.
    Bound to the URI: MLflow's process-wide tracking URI is never touched."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise UserError("tracking needs the mlflow extra: pip install 'tfyard[mlflow]'") \
            from None
    return MlflowClient(tracking_uri=settings.uri)


def usable(settings: Settings | None) -> Settings | None:
    """`settings` once one request has reached the server, before a command writes
    anything; None when it cannot be used and the user chose to go on untracked (a warning),
    otherwise that is a UserError."""
    if settings is None:
        return None
    environ = environ_set({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})
    try:
        client(settings).search_experiments(max_results=1)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - MLflow and its HTTP client raise many kinds
        return _unusable(settings, exc)
    finally:
        environ_set(environ)
    return settings


def _unusable(settings: Settings, exc: BaseException) -> None:
    """A server that cannot be used: a UserError, or with --mlflow_optional a warning."""
    message = failure(settings, exc, "cannot be used")
    if not settings.optional:
        raise UserError(message + ", or pass --mlflow_optional to train untracked") from None
    log.warning(f"tfyard: warning: {message}; training untracked (--mlflow_optional)")


def failure(settings: Settings, exc: BaseException, doing: str) -> str:
    """One line for a request that failed: what, where, what to check; secrets taken out."""
    what, check = said(exc)
    return scrubbed(f"MLflow at {settings.shown} {doing}: {what}; check {check}", settings.uri)


class Tracker:
    """The chief's MLflow run: `start` it, `log` each report, `log_outputs` at the end,
    `close` however the run ends (also as a context manager)."""

    def __init__(self, settings: Settings, mlflow, run_id: str, tags: dict[str, str],
                 environ: dict[str, str | None] | None = None, where: str = ""):
        self.settings, self.mlflow, self.run_id, self.tags = settings, mlflow, run_id, tags
        self.where = where            # the run in words: experiment, id, its page
        self._environ = environ or {}  # MLflow's settings as they were before the tracker
        self._high = {found.group(1): int(value) for tag, value in tags.items()
                      if (found := STEP_TAG.match(tag))}   # per kind: last step queued or sent
        self._warned = False
        # (kind, step, values) reports in order, weighed by their values
        self._queue = Bounded(QUEUE_MAX, BATCH, weight=lambda report: len(report[2]))
        self._sender = Sender(self._send, self._queue, TIMING, "tfyard-mlflow",
                              on_failing=self._warn)

    @classmethod
    def start(cls, settings: Settings, run_id: str | None, name: str, params: dict,
              tags: dict, history: list[dict], reopen: bool = True) -> Tracker | None:
        """Continue the MLflow run `run_id` (when the server holds it; marked running again
        when `reopen`) or create one named `name`; log the `params` it lacks and queue the
        reports of `history` (metrics.jsonl) it lacks. None when the server cannot be used
        and the user chose to go on untracked; otherwise that is a UserError."""
        environ = environ_set({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})
        try:
            mlflow = client(settings)   # a URI MLflow has no store for fails here
            run = _continued(mlflow, run_id, reopen) or created(mlflow, settings, name, tags)
            known = run.data.params
            log_params(mlflow, run.info.run_id,
                        {k: v for k, v in params.items() if k not in known})
            where = _where(mlflow, settings, run, continued=run.info.run_id == run_id)
        except Exception as exc:  # noqa: BLE001 - MLflow and its HTTP client raise many kinds
            environ_set(environ)
            return _unusable(settings, exc)
        except BaseException:
            environ_set(environ)
            raise
        tracker = cls(settings, mlflow, run.info.run_id, dict(run.data.tags), environ, where)
        for record in history:
            tracker.log(record)
        return tracker

    def log(self, record: dict) -> None:
        """Queue one report (a metrics.jsonl record: kind, step, time and the values);
        dropped when its step was logged already, by this run or before a restart."""
        kind, step = record["kind"], record["step"]
        if step <= self._high.get(kind, -1):
            return
        self._high[kind] = step
        from mlflow.entities import Metric

        prefix = "" if kind == "train" else f"{kind}_"
        at = int(record.get("time", time.time()) * 1000)
        values = [Metric(prefix + key, float(value), at, step) for key, value in record.items()
                  if key not in ("kind", "step", "epoch", "time")]
        self._sender.add((kind, step, values))

    def _warn(self, exc: Exception) -> None:
        """Named once, whatever follows: the metrics stay in metrics.jsonl."""
        if not self._warned:
            self._warned = True
            log.warning(f"tfyard: warning: {failure(self.settings, exc, 'failed')}; "
                        "metrics wait in the background (and in metrics.jsonl) until "
                        "it answers")

    def _send(self, batch: list) -> None:
        """One request: a batch's values and, per kind, the last step it holds; the batch
        leaves the queue only once the server took it."""
        from mlflow.entities import RunTag

        last = {kind: step for kind, step, _ in batch}
        self.mlflow.log_batch(
            self.run_id, metrics=[value for _, _, values in batch for value in values],
            tags=[RunTag(f"tfyard.{kind}_step", str(step)) for kind, step in last.items()])

    def log_outputs(self, files: list[str], export: str | None) -> None:
        """The run's files as artifacts and its export as an MLflow model (registered under
        `--register_model`), once: a run whose model is logged already keeps it. A failure
        is named, never raised."""
        try:
            for path in files:
                if os.path.exists(path):
                    self.mlflow.log_artifact(self.run_id, path)
            if export and MODEL_TAG not in self.tags:
                from tfyard.tracking import model

                log.info(f"tfyard: {model.log(self.settings, self.run_id, export)}")
                self.mlflow.set_tag(self.run_id, MODEL_TAG, "logged")
        except Exception as exc:  # noqa: BLE001 - the run is done and on disk whatever happens
            taken = failure(self.settings, exc, "did not take the run's files")
            log.warning(f"tfyard: warning: {taken}; `tfyard track --output_dir RUN` sends "
                        "them later")

    def close(self, status: str | None = "FINISHED") -> int:
        """Send what is queued (for FLUSH_S at most), then end the MLflow run as `status`
        (None: leave it as it is); the number of metric values left unsent (named in a
        warning). MLflow's settings are put back as they were before the tracker."""
        try:
            return self._close(status)
        finally:
            environ_set(self._environ)

    def _close(self, status: str | None) -> int:
        self._sender.close(FLUSH_S)
        with self._sender.lock:
            unsent = self._queue.held + self._queue.dropped
        if unsent:
            log.warning(f"tfyard: warning: {unsent} metrics not sent to MLflow at "
                        f"{self.settings.shown}; they are in metrics.jsonl (`tfyard track "
                        "--output_dir RUN` sends them)")
            return unsent
        if status is None:
            return 0
        try:
            self.mlflow.set_terminated(self.run_id, status)
        except Exception as exc:  # noqa: BLE001
            log.warning(f"tfyard: warning: {failure(self.settings, exc, 'failed')}; the "
                        f"MLflow run {self.run_id} stays marked running")
        return 0

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, kind, exc, _tb) -> None:
        if kind is None:
            status = "FINISHED"
        elif issubclass(kind, (SystemExit, KeyboardInterrupt)):
            status = "KILLED"   # preempted or interrupted: a rerun continues it
        else:
            status = "FAILED"
        self.close(status)


def _continued(mlflow, run_id: str | None, reopen: bool):
    """The run `run_id` (marked running again when `reopen`), or None when there is none
    (or this server lacks it)."""
    if not run_id:
        return None
    from mlflow.exceptions import MlflowException

    try:
        run = mlflow.get_run(run_id)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    if reopen:
        mlflow.update_run(run_id, status="RUNNING")
    return run


def _where(mlflow, settings: Settings, run, continued: bool) -> str:
    """The run in words: its experiment, its id, and its page in the server's UI (for a
    server that has one: an http(s) URI)."""
    experiment_id = run.info.experiment_id
    experiment = mlflow.get_experiment(experiment_id).name
    said_run = (f"{'continuing' if continued else 'logging to'} MLflow run {run.info.run_id} "
                f"in experiment {experiment!r}")
    parts = urlsplit(settings.uri)
    if parts.scheme in ("http", "https"):   # the page's address, without credentials
        page = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2],
                           parts.path.rstrip("/"), "", ""))
        return f"{said_run}: {page}/#/experiments/{experiment_id}/runs/{run.info.run_id}"
    return f"{said_run} at {settings.shown}"


def created(mlflow, settings: Settings, name: str, tags: dict):
    experiment = settings.experiment
    found = mlflow.get_experiment_by_name(experiment) if experiment else None
    experiment_id = (found.experiment_id if found else
                     mlflow.create_experiment(experiment) if experiment else "0")
    return mlflow.create_run(experiment_id, run_name=settings.run_name or name, tags=tags)


def log_params(mlflow, run_id: str, params: dict) -> None:
    from mlflow.entities import Param

    entries = [Param(key, str(value)[:PARAM_MAX]) for key, value in sorted(params.items())]
    for first in range(0, len(entries), 100):   # MLflow takes 100 parameters a request
        mlflow.log_batch(run_id, params=entries[first:first + 100])
