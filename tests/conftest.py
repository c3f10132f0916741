"""Shared test set-up: quiet TensorFlow, no inherited cluster, a way to run the CLI, a local
Ray for the tests that need one, one MLflow tracking server for every test that tracks,
the heavy files first, and each test's garbage collected as it ends."""

from __future__ import annotations

import collections
import contextlib
import gc
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests import shared_servers

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The suite trains on the CPU; the GPU slice (tests/gpu) gives its children the devices the
# suite was started with.
# xdist's workers inherit the controller's environment, so the devices it started with are
# kept for them in TFYARD_TESTS_DEVICES ("*": CUDA_VISIBLE_DEVICES was unset, every GPU).
_STARTED = os.environ.setdefault("TFYARD_TESTS_DEVICES",
                                 os.environ.get("CUDA_VISIBLE_DEVICES", "*"))
STARTED_WITH_DEVICES = None if _STARTED == "*" else _STARTED
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# Read when Ray is imported: no usage stats, and every Ray address on loopback.
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
# Read by every Spark JVM a test starts through spark-submit (local mode's executors live in
# it): on these short sessions the client compiler alone and one GC thread spend ~40% less
# CPU than C2 and parallel GC's threads (a local session: 44 -> 28 s), and change nothing a
# test checks. The standalone cluster's daemons and executors are given it by their test.
LEAN_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_SUBMIT_OPTS", LEAN_JVM)
# The suite runs as from its activated venv, as a reader's commands do: this interpreter's
# `tfyard`, `mlflow`, `uvicorn` and `spark-submit` first on PATH, where a docs page's line, a
# launcher's member (`-- tfyard train`, a local Ray's actor too) and MLflow find them by name.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]


HEAVY = ("cluster", "spark", "ray", "slow")
# The local Ray the running tests share, while it is up: {"address": its GCS address}.
_RAY: dict[str, str] = {}


def pytest_collection_modifyitems(items):
    """The files with the most heavy scenarios (multi-process clusters, Spark, Ray, long
    runs) run first, each file's tests together and in their order: the long tests start
    early, and `make test` (xdist's worksteal takes from the ends of the queues) ends on
    short ones rather than on one worker finishing a cluster while the others wait."""
    weight = collections.Counter(item.path for item in items
                                 if any(item.get_closest_marker(name) for name in HEAVY))
    items.sort(key=lambda item: -weight[item.path])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A test's cyclic garbage (Keras models, traced functions, the tf.data iterators they
    hold) is collected as it ends, while its iterators are young: TensorFlow takes up to a
    minute to delete one that lived a minute or more (`tfyard.data.release`), which a collection
    in a later test would wait. What survives is frozen, so each collection walks one test's
    objects (a full one walks ~400,000 in 0.4 s once TensorFlow is loaded). The local Ray
    is shut down once the next test does not use it (`ray_address`)."""
    yield
    if _RAY and "ray_address" not in getattr(nextitem, "fixturenames", ()):
        import ray

        _RAY.clear()
        ray.shutdown()
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def tfyard_logger_kept():
    """The `tfyard` logger as it was before the block: a CLI run in this process configures
    it (own handler, no propagation)."""
    logger = logging.getLogger("tfyard")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    try:
        yield
    finally:
        logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate


@pytest.fixture(autouse=True)
def _fresh_tfyard_logger():
    """A test that runs the CLI in-process configures the `tfyard` logger; undo it so the
    next test's caplog sees the records again."""
    with tfyard_logger_kept():
        yield


# A cluster, platform or tracking setting a test must never inherit: from the caller's shell,
# or from an earlier test in the same worker (MLflow's `set_tracking_uri` sets its variable)
INHERITED = ("TF_CONFIG", "TF_CONFIG_FILE", "TFYARD_DATA_DIR", "TFYARD_OUTPUT_DIR",
             "TFYARD_WORK_DIR", "TFYARD_LOG_DIR", "TFYARD_NUM_GPUS", "MLFLOW_TRACKING_URI",
             "MLFLOW_EXPERIMENT_NAME")


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch):
    """Tests never inherit a TF_CONFIG, platform or tracking settings (a module's fixtures,
    made before this, scrub `INHERITED` themselves)."""
    for name in INHERITED:
        monkeypatch.delenv(name, raising=False)


def run_tfyard(*args, env=None, timeout=600, cwd=None) -> subprocess.CompletedProcess:
    """Run `python -m tfyard ARGS` in a fresh process and capture its output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tfyard", *map(str, args)],
        capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd,
    )


def run_here(capture, *args) -> subprocess.CompletedProcess:
    """`tfyard ARGS` through `cli.main` in this process, as run_tfyard reports a fresh one:
    its exit status and what it printed, read through `capture` (pytest's capsys, or capfd
    where TensorFlow's own lines must show too): no interpreter and TensorFlow import to pay
    where a fresh process is not the point."""
    from tfyard.cli import main

    capture.readouterr()
    try:
        code = main([str(arg) for arg in args])
    except SystemExit as exited:   # a usage error
        code = exited.code
    out, err = capture.readouterr()
    return subprocess.CompletedProcess(list(args), code, out, err)


def python_prints(code: str) -> str:
    """What `python -c CODE` prints, run in a fresh interpreter (for what an import loads)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.fixture
def ray_address():
    """One local Ray (2 CPUs on 127.0.0.1, no dashboard, no usage stats) for each run of
    consecutive tests that use it, whatever their modules: started by the first, shut down
    after the last (`pytest_runtest_teardown`), so Ray modules run one after the other start
    it once (~9 s of CPU a start) and no idle cluster outlives them. Always a new one
    (address "local"), never a head another test started."""
    ray = pytest.importorskip("ray")
    if not _RAY:
        context = ray.init(address="local", num_cpus=2, include_dashboard=False,
                           logging_level=logging.WARNING, log_to_driver=False)
        _RAY["address"] = context.address_info["gcs_address"]
    assert _RAY["address"].startswith("127.0.0.1:")
    return _RAY["address"]


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory):
    """One tracking server (`tests.tracking.conftest.mlflow_server`) for all of a run's
    tests, whatever their directory and xdist worker (`tests.shared_servers`; each test
    works in its own experiment): defined here, not imported into each module that tracks,
    since each import would start its own."""
    from tests.tracking.conftest import mlflow_server, shared_mlflow_server

    if shared_servers.under_xdist():
        yield shared_servers.shared(tmp_path_factory, "mlflow", shared_mlflow_server)
        return
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as url:
        yield url


def pytest_sessionfinish(session):
    """The controller of an xdist run stops the servers its workers shared, once all are
    done."""
    config = session.config
    if config.pluginmanager.hasplugin("dsession"):   # xdist's, in the controller alone
        shared_servers.stop_all(config._tmp_path_factory.getbasetemp())


@pytest.fixture
def experiment() -> str:
    """A new experiment's name: the test's runs, apart from every other test's."""
    return f"test-{uuid.uuid4().hex[:12]}"


# The one trained image-folder run and its photos (tests/predict/conftest.py) for every test
# outside tests/predict that scores, serves or tracks one: registered here once, as each
# module importing them would train its own.
from tests.predict.conftest import folder, run  # noqa: E402, F401


@pytest.fixture(scope="session")
def digits_work(tmp_path_factory) -> Path:
    """One materialised copy of the digits TFRecords shared by every training test."""
    work = tmp_path_factory.mktemp("digits-work")
    from tfyard.data import dataset_info

    dataset_info("digits", cache_dir=str(work))
    return work
