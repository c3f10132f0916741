"""Experiment tracking: every run in MLflow, from one setting, logged by the chief alone.

Tracking is on when `--mlflow_uri` or MLflow's own MLFLOW_TRACKING_URI is set (the flag
wins); `--experiment` or MLFLOW_EXPERIMENT_NAME picks the experiment, `--run_name` names the
run. With neither set, nothing imports MLflow (the `mlflow` extra). `mlflow_run.Tracker` is
the live run of a training run; `backfill.track` logs a run directory afterwards
(`tfyard track`). Secrets (a password in the URI, MLflow's token and password variables)
never reach a parameter, a log line or run.json: `redacted` and `scrubbed` take them out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tfyard.errors import UserError
from tfyard.storage import scheme_of

URI_ENV, EXPERIMENT_ENV = "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"
# MLflow's own credential variables: their values are taken out of every message.
SECRET_ENVS = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD")
RUN_ID = "mlflow_run_id"   # run.json's field: the MLflow run a resumed run continues


@dataclass(frozen=True)
class Settings:
    """Where and how a run is tracked."""

    uri: str
    experiment: str | None = None
    run_name: str | None = None
    optional: bool = False          # an unreachable server at the start: train untracked
    register_model: str | None = None

    @property
    def shown(self) -> str:
        return redacted(self.uri)


def settings(uri: str | None = None, experiment: str | None = None,
             run_name: str | None = None, optional: bool = False,
             register_model: str | None = None) -> Settings | None:
    """The tracking settings, flags over MLflow's variables; None when tracking is off."""
    uri = uri or os.environ.get(URI_ENV)
    if not uri:
        if register_model:
            raise UserError("--register_model needs tracking on: give --mlflow_uri or set "
                            f"{URI_ENV}")
        return None
    return Settings(uri, experiment or os.environ.get(EXPERIMENT_ENV) or None, run_name,
                    optional, register_model)


def environ_set(values: dict[str, str | None]) -> dict[str, str | None]:
    """Set each variable of `values` in os.environ (None: unset it); what was there before,
    which this undoes exactly: tracking leaves the user's process as it found it."""
    before = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    return before


def redacted(uri: str | None) -> str | None:
    """`uri` with the password of its user part and its query's values replaced by ***
    (`https://me:secret@host` -> `https://me:***@host`)."""
    if not uri or scheme_of(uri) is None:
        return uri
    parts = urlsplit(uri)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}" if ":" in user else f"***@{host}"
    query = urlencode([(key, "***") for key, _ in parse_qsl(parts.query)], safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def scrubbed(text: str, uri: str | None) -> str:
    """`text` (an error's message) without the secrets of `uri` and of MLflow's variables."""
    secrets = [os.environ.get(name) for name in SECRET_ENVS]
    if uri and scheme_of(uri) is not None:
        parts = urlsplit(uri)
        secrets += [parts.password, *(value for _, value in parse_qsl(parts.query))]
    for secret in filter(None, secrets):
        text = text.replace(secret, "***")
    return text
