"""`tfyard predict --on spark|ray`: INPUT listed on the driver by `inputs.py`, as local
predict lists it, its paths read and scored by the engine's workers (`spark.py`, `ray.py`)
and written by them as part files into `--output DIR`, in the same columns and formats as
local predict's table.

No image passes through the driver, only the paths and the final counts, read back from
the parts' `error` column a batch at a time. The engine writes into a hidden staging
directory beside DIR, which takes DIR's place only when every part is written
(`tfyard.replace`): a killed job leaves the previous DIR (or none), which a rerun writes again
whole; parts are never doubled, a half-written DIR is never seen, and another predict's
staging is left alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass

from tfyard.errors import UserError
from tfyard.platform import is_remote
from tfyard.predict import inputs as listing
from tfyard.predict import worker
from tfyard.predict.local import Outcome, named_error, progress
from tfyard.predict.options import PredictOptions
from tfyard.predict.rows import COLUMNS, LIST_COLUMNS
from tfyard.predict.writers import format_of
from tfyard.replace import check_writable, replacing_directory

ENGINES = ("spark", "ray")
ARROW_FORMATS = {"parquet": "parquet", "jsonl": "json", "csv": "csv"}
# Spark writes csv quotes as \" and leaves null fields out of json unless told: written so,
# the parts read back (and read elsewhere) as local predict's tables do.
SPARK_OPTIONS = {"parquet": {}, "jsonl": {"ignoreNullFields": "false"},
                 "csv": {"header": "true", "escape": '"'}}
OPEN_COST = 64 * 1024   # what a file's handling costs beyond its bytes, as more JPEG
TASK_BYTES = 512 * 2**20


@dataclass(frozen=True)
class Plan:
    """A checked `predict --on ENGINE`: what to score, with what, into where."""

    job: worker.Job
    inputs: list[str]
    output: str
    fmt: str

    @property
    def workers(self) -> int | None:
        return self.job.options.workers


def plan(run, inputs, output, fmt, options: PredictOptions) -> Plan:
    """Everything checked before an engine starts, so a mistake answers at once; `options`
    are the CLI's, checked."""
    job = worker.job(run, options, cli=True)
    inputs = listing.check(inputs)
    if output is None:
        raise UserError("--on spark and --on ray write part files: give --output DIR")
    if is_remote(output):
        raise UserError(f"--output {output}: give a directory path that this machine and the "
                        "workers share (a local disk in local mode, else a mounted file system)")
    check_writable(output, "--output", "directory")
    return Plan(job, inputs, os.path.abspath(output), format_of(output, fmt or "parquet"))


def on_spark(sc, plan: Plan) -> Outcome:
    """Score with the SparkContext `sc`: a DataFrame of INPUT's paths, which the workers
    read, in `_tasks`."""
    from pyspark.sql import SparkSession, functions

    from tfyard.predict.spark import score

    paths = [(path,) for path in listing.image_files(plan.inputs)]
    tasks = min(_tasks(paths, sc.defaultParallelism), len(paths))
    images = SparkSession(sc).createDataFrame(sc.parallelize(paths, tasks), "path string")
    scored = sc.accumulator(0)   # merged as each task ends
    rows = score(images, plan.job, scored).select(*COLUMNS)
    if plan.fmt == "csv":
        rows = rows.withColumns({name: functions.to_json(name) for name in LIST_COLUMNS})
    writer = rows.write.mode("overwrite").format(ARROW_FORMATS[plan.fmt]).options(
        **SPARK_OPTIONS[plan.fmt])
    return _written(plan, writer.save, lambda: scored.value)


def _tasks(paths: list[tuple[str]], cores: int) -> int:
    """How many tasks: as Spark's file sources pack them, by bytes, but each file counted
    OPEN_COST beyond its own (Spark counts 4 MB: ~30 photos a task, while each task pays ~0.6 s
    of a worker for its tf.data pipeline; a file's handling costs ~2 ms small, ~7 ms a 185 KB
    photo), up to TASK_BYTES a task: ~13 s of a worker's time, photos or small files alike,
    and at least 2 tasks a core."""
    def cost(path: str) -> int:
        try:
            return os.path.getsize(path) + OPEN_COST
        except OSError:   # gone since it was listed: its row says so
            return OPEN_COST

    return max(2 * cores, -(-sum(cost(path) for path, in paths) // TASK_BYTES))


def on_ray(plan: Plan) -> Outcome:
    """Score with the Ray this process is connected to: a Dataset of INPUT's paths, which the
    actors read (the driver holds the list once, as Ray's own file readers hold theirs)."""
    import ray

    from tfyard.predict.ray import Counter, score_paths

    ray.data.DataContext.get_current().enable_progress_bars = False  # predict's bar shows
    # nor its progress as log lines, nor a failure's traceback: it is raised here, in one line
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)
    scored = ray.remote(num_cpus=0)(Counter).remote()
    rows = score_paths(list(listing.image_files(plan.inputs)), plan.job, plan.workers,
                       scored).select_columns(list(COLUMNS))
    if plan.fmt == "csv":
        rows = rows.map_batches(_lists_as_json, batch_format="pyarrow")
    write = {"parquet": rows.write_parquet, "jsonl": rows.write_json,
             "csv": rows.write_csv}[plan.fmt]
    return _written(plan, write, lambda: ray.get(scored.value.remote()))


def _lists_as_json(table):
    """csv cells of lists hold JSON, as a local predict writes them."""
    import pyarrow as pa

    for name in LIST_COLUMNS:
        cells = [json.dumps(cell) for cell in table.column(name).to_pylist()]
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(cells))
    return table


def _written(plan: Plan, write, scored) -> Outcome:
    """Run the engine's `write(staging)` under local predict's progress bar, fed by
    `scored()` (the files scored so far, as the engine reports them), count the rows, and
    put the parts in place."""
    start = time.monotonic()
    with replacing_directory(plan.output) as staging, progress(plan.inputs) as advance, \
            _following(scored, advance):
        try:
            write(staging)
        except Exception as exc:  # the engine wraps a worker's failure in its own error
            raise worker.driver_error(exc) or exc from None
        outcome = _counted(staging, plan.fmt)
    outcome.seconds = time.monotonic() - start
    return outcome


@contextlib.contextmanager
def _following(scored, advance, every: float = 0.5):
    """Poll `scored()` in a thread while the engine works, advancing the bar by the news,
    and once more when it is done (not after a failure: the engine may be gone)."""
    stop, seen = threading.Event(), 0

    def catch_up():
        nonlocal seen
        now = scored()
        advance(now - seen)
        seen = now

    def follow():
        while not stop.wait(every):
            catch_up()

    thread = threading.Thread(target=follow, name="tfyard-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    catch_up()


def _counted(directory: str, fmt: str) -> Outcome:
    """The final line's counts, read from the written parts' path and error columns (as
    strings: a csv column of empty cells has no type to guess)."""
    import pyarrow as pa
    import pyarrow.csv
    import pyarrow.dataset as ds

    outcome = Outcome()
    strings = {"path": pa.string(), "error": pa.string()}
    parts = ds.dataset(directory, format=ds.CsvFileFormat(
        convert_options=pyarrow.csv.ConvertOptions(column_types=strings))
        if fmt == "csv" else ARROW_FORMATS[fmt])
    for batch in parts.to_batches(columns=list(strings)):
        for path, error in zip(*(batch.column(i).to_pylist() for i in range(2)), strict=True):
            if error:
                outcome.unreadable += 1
                outcome.first_problem = outcome.first_problem or named_error(
                    {"path": path, "error": error})
            else:
                outcome.predicted += 1
    return outcome
