"""What an engine's worker runs: the Predictor loaded once per process, Arrow batches of
(path, bytes) scored into columns, and a failure carried back to the driver as one line.

Spark's Python workers and Ray's actors live for many batches, so the model is loaded at the
first and kept in a module-level cache keyed by the SavedModel and the options: a million
files cost one load per worker, not one per batch (keras#11169). The model travels by path;
a worker that cannot read it says so, naming itself. A failure the user must read (a broken
file under on_error="fail", a model the worker cannot read or load, the Predictor's own
refusals) is raised with a mark, which the driver finds in the engine's wrapped traceback and
raises again as the one UserError line local predict prints.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.platform import is_remote
from tfyard.predict.inputs import content
from tfyard.predict.local import locate, stopped
from tfyard.predict.options import PredictOptions
from tfyard.predict.rows import arrow_schema
from tfyard.runfiles.study import run_named
from tfyard.storage import readable_dir, stores

log = logging.getLogger("tfyard")
MARK = "tfyard-predict-failed: "
FETCHES = 8   # images read from a bucket at once, by each worker
LOAD_LOG = "TFYARD_PREDICT_LOAD_LOG"   # a file each model load appends "host pid path" to
_loaded: dict = {}


@dataclass(frozen=True)
class Job:
    """What every worker needs to score, sent to it with the engine's function."""

    saved_model: str
    options: PredictOptions = PredictOptions()   # checked by the caller, once
    cli: bool = False   # whether errors spell the options as flags
    load_log: str | None = None
    threads: int | None = None   # TensorFlow's op threads a worker: its cores (None: all)
    # The driver's store settings (AWS_*, GOOGLE_*, ...), for workers reading a bucket (never
    # printed)
    storage_env: tuple = field(default=(), repr=False)


def said_if_empty(empty: bool, what: str, hint: str) -> None:
    """One line when the user's rows are none: the engine would score 0 rows in silence."""
    if empty:
        log.warning(f"tfyard: warning: {what} has no rows, so nothing is scored; {hint}")


def job(run, options: PredictOptions, cli: bool = False) -> Job:
    """The Job for `run`'s model and checked `options`, made on the driver before the engine
    starts work. A model in a bucket travels by its URL: each worker copies it itself."""
    run = run_named(os.fspath(run))   # a study's best run: copy that run alone
    copy = readable_dir(run, None, OUTPUT_FLAG)   # a bucket's run: copied once, here
    saved_model = locate(copy)
    if copy != run:
        inside = os.path.relpath(saved_model, copy)
        saved_model = run.rstrip("/") + ("" if inside == "." else "/" + inside)
    elif not is_remote(saved_model):  # the workers' working directory is not ours
        saved_model = os.path.abspath(saved_model)
    return Job(saved_model, options, cli, os.environ.get(LOAD_LOG), storage_env=stores.settings())


def predicted_schema():
    """The columns a scored batch gains: the rows' columns but `path`, the engine's own."""
    schema = arrow_schema()
    return schema.remove(schema.get_field_index("path"))


def failure(text: str) -> RuntimeError:
    return RuntimeError(MARK + text)


def predictor(job: Job):
    """This process's Predictor for `job`, loaded at its first batch and kept."""
    key = (job.saved_model, job.options.top_k, job.options.batch_size)
    if key not in _loaded:
        import tensorflow as tf

        if job.threads:
            _use_threads(tf, job.threads)
        try:
            local = readable_dir(job.saved_model, None, OUTPUT_FLAG)   # a bucket's: copied
        except UserError as exc:
            raise failure(f"{exc} (on worker {socket.gethostname()})") from None
        if not tf.io.gfile.exists(os.path.join(local, "saved_model.pb")):
            raise failure(f"the model {job.saved_model} cannot be read on worker "
                          f"{socket.gethostname()} (pid {os.getpid()}); it travels by path: "
                          "put it on a file system every worker reads (shared or distributed)")
        _loaded[key] = _load(tf, job, local)
        if job.load_log:
            with open(job.load_log, "a") as log:
                log.write(f"{socket.gethostname()} {os.getpid()} {job.saved_model}\n")
    return _loaded[key]


def _load(tf, job: Job, local: str):
    """The Predictor of the SavedModel at `local`, its refusals and TensorFlow's load errors
    marked for the driver."""
    from tfyard.predict.predictor import Predictor

    try:
        return Predictor(local, job.options.top_k, job.options.batch_size)
    except UserError as exc:
        raise failure(str(exc)) from None
    except (tf.errors.OpError, ValueError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise failure(f"the model {job.saved_model} cannot be loaded on worker "
                      f"{socket.gethostname()}: {first}; export it again with this "
                      "tfyard") from None


def _use_threads(tf, threads: int) -> None:
    """TensorFlow's op thread pools sized to this worker's share of the cores: two workers
    on 2 cores, each with pools for both, score ~10% slower together than with one thread
    each (`benchmarks/RESULTS.md`). Once TensorFlow has run in this process (the user's own
    code, in the same worker) its pools are fixed, and stay as they are."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        pass


def scored(job: Job, batches, path: str, content: str | None, counted=None):
    """(batch, its predicted columns as Arrow arrays in `predicted_schema` order) for each
    Arrow batch with rows, all drawn through one Predictor pipeline, so a partition pays for
    one pipeline however many batches it has; with on_error="fail" the first unreadable
    image fails the job. Without a `content` column each image is read by TensorFlow from
    its path, in the pipeline's parallel reads (`readable`). `counted(n)`, when given, hears
    of every model batch's rows as they come out, for a progress bar."""
    import pyarrow as pa

    os.environ.update(dict(job.storage_env))   # a bucket is reached as the driver reaches it
    schema, held, rows = predicted_schema(), collections.deque(), []

    def items():
        with ThreadPoolExecutor(FETCHES) as fetches:   # images in a bucket: 8 GETs at once
            for batch in batches:
                if batch.num_rows:
                    held.append(batch)
                    names = batch.column(path).to_pylist()
                    for start in range(0, len(names), FETCHES * 4):
                        part = names[start:start + FETCHES * 4]
                        data = (fetches.map(readable, part) if content is None
                                else batch.column(content).slice(start, len(part)).to_pylist())
                        yield from zip(part, data, strict=True)

    batch_size = job.options.batch_size
    for row in predictor(job).rows(items()):
        if row["error"] and job.options.on_error == "fail":
            raise failure(str(stopped(row, job.cli)))
        rows.append(row)
        if counted is not None and (len(rows) % batch_size == 0
                                    or len(rows) == held[0].num_rows):
            counted(len(rows) % batch_size or batch_size)
        if len(rows) == held[0].num_rows:
            yield held.popleft(), [pa.array([r[field.name] for r in rows], field.type)
                                   for field in schema]
            rows = []


def readable(path):
    """A path TensorFlow reads, for an engine's: Spark names local files `file:/...`; an
    object in a bucket is read here, its bytes given instead (a missing one stays a
    path to nothing); anything else, a null cell, say, is left for the Predictor to refuse."""
    if not isinstance(path, str):
        return path
    try:
        path = content(path)
    except UserError as exc:   # the store refused or is down: the job stops, one line
        raise failure(f"{exc} (on worker {socket.gethostname()})") from None
    if not isinstance(path, str):
        return path
    return path[len("file://"):] if path.startswith("file://") else path.removeprefix("file:")


def driver_error(exc: BaseException) -> UserError | None:
    """The one line a worker's marked failure carries, from the engine's error text."""
    _, found, text = str(exc).partition(MARK)
    return UserError(text.splitlines()[0].strip()) if found else None
