"""`tfyard predict --on spark|ray`: INPUT listed by the engine, read and scored by its workers
(`spark.py`, `ray.py`), written by them as part files into `--output DIR`.

Nothing passes through the driver but the final counts, read back from the parts' `error`
column a batch at a time. The engine writes into a hidden staging directory beside DIR,
which takes DIR's place only when every part is written (`tfyard.replace`): a killed job
leaves the previous DIR (or none), which a rerun writes again whole; parts are never doubled,
a half-written DIR is never seen, and another predict's staging is left alone.
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
from tfyard.predict.local import Outcome, progress
from tfyard.predict.writers import LIST_COLUMNS, arrow_schema, format_of
from tfyard.replace import check_writable, replacing_directory

ENGINES = ("spark", "ray")
ARROW_FORMATS = {"parquet": "parquet", "jsonl": "json", "csv": "csv"}
OPEN_COST = 64 * 1024   # bytes Spark counts for opening a file when it packs tasks
TASK_BYTES = 512 * 2**20


@dataclass(frozen=True)
class Plan:
    """A checked `predict --on ENGINE`: what to score, with what, into where."""

    job: worker.Job
    inputs: list[str]
    output: str
    fmt: str
    workers: int | None


def plan(run, inputs, output, fmt, top_k, batch_size, on_error, workers) -> Plan:
    """Everything checked before an engine starts, so a mistake answers at once."""
    job = worker.job(run, top_k, batch_size, on_error)
    inputs = listing.check(inputs)
    if output is None:
        raise UserError("--on spark and --on ray write part files: give --output DIR")
    if is_remote(output):
        raise UserError(f"--output {output}: give a directory path that this machine and the "
                        "workers share (a local disk in local mode, else a mounted file system)")
    check_writable(output, "--output", "directory")
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be at least 1, got {workers}")
    return Plan(job, inputs, os.path.abspath(output), format_of(output, fmt or "parquet"),
                workers)


def on_spark(sc, plan: Plan) -> Outcome:
    """Score with the SparkContext `sc`: `binaryFile` reads INPUT in its tasks."""
    from pyspark.sql import SparkSession, functions

    from tfyard.predict.spark import score

    spark = SparkSession(sc)
    # Spark packs files into tasks by bytes, counting 4 MB for opening each: ~30 photos a
    # task. Each task pays ~0.6 s of a worker for its own tf.data pipeline, so count what a
    # file's handling costs beyond its bytes (~2 ms a small file, ~7 ms a 185 KB photo: as
    # much as 64 KB more JPEG) and pack ~13 s of a worker's time a task, 2 tasks a core or
    # more.
    spark.conf.set("spark.sql.files.openCostInBytes", str(OPEN_COST))
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(TASK_BYTES))
    spark.conf.set("spark.sql.files.minPartitionNum", str(2 * sc.defaultParallelism))
    any_case = ",".join("".join(f"[{c}{c.upper()}]" for c in e.lstrip("."))  # .JpG too
                        for e in listing.EXTENSIONS)
    images = (spark.read.format("binaryFile").option("recursiveFileLookup", "true")
              .option("pathGlobFilter", f"*.{{{any_case}}}")
              .load(plan.inputs).select("path"))   # the workers read each file themselves
    scored = sc.accumulator(0)   # merged as each task ends
    rows = score(images, plan.job, scored).select(*arrow_schema().names)
    if plan.fmt == "csv":
        rows = rows.withColumns({name: functions.to_json(name) for name in LIST_COLUMNS})
    writer = rows.write.mode("overwrite").format(ARROW_FORMATS[plan.fmt]).option("header", True)
    return _written(plan, writer.save, lambda: scored.value)


def on_ray(plan: Plan) -> Outcome:
    """Score with the Ray this process is connected to: a Dataset of INPUT's paths, which the
    actors read (the driver holds the list once, as Ray's own file readers hold theirs)."""
    import ray

    from tfyard.predict.ray import Counter, score_paths

    ray.data.DataContext.get_current().enable_progress_bars = False  # predict's bar shows
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # nor its progress as log lines
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)  # nor that
    scored = ray.remote(num_cpus=0)(Counter).remote()
    rows = score_paths(list(listing.image_files(plan.inputs)), plan.job, plan.workers,
                       scored).select_columns(arrow_schema().names)
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
    """The final line's counts, read from the written parts' path and error columns."""
    import pyarrow.dataset as ds

    outcome = Outcome()
    parts = ds.dataset(directory, format=ARROW_FORMATS[fmt])
    for batch in parts.to_batches(columns=["path", "error"]):
        for path, error in zip(*(batch.column(i).to_pylist() for i in range(2)), strict=True):
            if error:
                outcome.unreadable += 1
                outcome.first_problem = outcome.first_problem or f"{path}: {error}"
            else:
                outcome.predicted += 1
    return outcome
