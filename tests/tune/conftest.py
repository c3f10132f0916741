"""Tune's tests run most studies with a stand-in for `tfyard train` (tests/tune/stand_in.py):
the scheduling, pruning, failures and resume of the real search loop, without TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from tests import shared_servers
from tests.tune import postgres

STAND_IN = (sys.executable, str(Path(__file__).with_name("stand_in.py")))
ROOT = Path(__file__).resolve().parents[2]
# `tfyard tune ARGV` with stand-in trials in a process of its own: for a tune killed outside.
TUNE_CODE = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
             "from tests.tune.conftest import tune; tune(*sys.argv[1:])")


def write_space(directory: Path, space: dict | str) -> str:
    path = directory / ("space.yaml" if isinstance(space, str) else "space.json")
    path.write_text(space if isinstance(space, str) else json.dumps(space))
    return str(path)


def tune(*argv) -> dict:
    """Run `tfyard tune ARGV` here with stand-in trials, as the CLI runs it; tune.json's
    content."""
    from dataclasses import asdict

    from tfyard.cli import build_parser
    from tfyard.tune.settings import TuneSettings

    args, rest = build_parser().parse_known_args(["tune", *map(str, argv)])
    return stand_in_tune(**asdict(TuneSettings.from_args(args)), train_argv=rest)


def stand_in_tune(*args, **kwargs) -> dict:
    """`tfyard.tune(...)` with stand-in trials."""
    import tfyard

    with mock.patch("tfyard.tune.trial.TRAIN", STAND_IN):
        return tfyard.tune(*args, **kwargs)


def eval_records(run_dir) -> list[dict]:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def killed_while_training(tmp_path, argv, sig, reports: int = 2, trial: int = 0) -> int:
    """Start tune (stand-in trials) in a process group of its own, send `sig` to it once its
    trial `trial` has made `reports` reports, and return its exit status."""
    tuner = subprocess.Popen([sys.executable, "-c", TUNE_CODE, *argv], start_new_session=True,
                             env={**os.environ, "STAND_IN_STEP_S": "0.3"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = tmp_path / "study" / "trials" / f"{trial:04d}" / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not (first.exists() and len(first.read_text().splitlines()) >= reports):
        assert time.monotonic() < deadline and tuner.poll() is None, tuner.stderr.read()
        time.sleep(0.1)
    os.killpg(tuner.pid, sig)
    _, err = tuner.communicate(timeout=60)
    time.sleep(1)   # after a SIGKILL, the trial's guard takes the trial's own group down
    reached = eval_records(first.parent)[-1]["step"]
    time.sleep(1)
    assert eval_records(first.parent)[-1]["step"] == reached < 100, err   # nothing runs on
    return tuner.returncode


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory) -> str:
    """A real PostgreSQL server's database (`tests/tune/postgres.py`), one for the run:
    each test's study has a name of its own in it."""
    if shared_servers.under_xdist():
        yield shared_servers.shared(tmp_path_factory, "postgres", postgres.server)
        return
    with postgres.running(tmp_path_factory.mktemp("postgres")) as url:
        yield url
