"""`tfyard.spark.predict`: a Spark DataFrame of encoded images (`binaryFile`'s `path` and
`content`) -> the same DataFrame with the prediction columns added, lazily.

A DataFrame of `path` alone (binaryFile's, `.select("path")`, so Spark never reads the files)
has each image read by the worker's TensorFlow from that path, which every worker must then
read: the JVM does not pass each file's bytes to Python and back, a third of the job's time
with photos on 2 cores (`benchmarks/RESULTS.md`). `tfyard predict --on spark` scores so.

`mapInArrow` hands each Python worker a task's Arrow batches of the images; the worker scores
them through one pipeline of the Predictor it loaded once (`worker.py`) and returns each
batch with the columns added, so the query stays lazy, composes with the user's own, and
nothing is collected to the driver. The batches are capped at a few model batches (Spark's
default is 10,000 rows, 10,000 photos in one worker's memory).
"""

from __future__ import annotations

from dataclasses import replace

from tfyard.errors import UserError
from tfyard.predict import worker
from tfyard.predict.options import PredictOptions

MAX_RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"
BATCHES_PER_ARROW_BATCH = 4
_importing: set = set()   # (application, Python) whose workers were seen to import tfyard


def predict(df, run, top_k: int = 5, batch_size: int = 32, on_error: str = "skip"):
    """`df` with class_id, class_name, score, top_ids, top_names, top_scores and error
    added for the image in each row's `content` (or, without it, at its `path`), as
    `tfyard predict` gives them: a null, empty or unreadable cell gets a row with an
    error."""
    options = PredictOptions(top_k, batch_size, on_error).checked()
    scored = score(df, worker.job(run, options))
    # a path-only question: binaryFile then lists the files and reads none
    worker.said_if_empty(df.select("path").isEmpty(), "the DataFrame",
                         "binaryFile reads the files of the folder given, not of its "
                         "subfolders: add .option('recursiveFileLookup', 'true') for a folder "
                         "of class folders")
    return scored


def score(df, job: worker.Job, scored=None):
    """`predict` for a checked Job (`tfyard predict --on spark` makes one first), adding
    each batch's rows to the accumulator `scored` when given."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructType

    missing = {"path"} - set(df.columns)
    if missing:
        raise UserError(f"the DataFrame lacks {', '.join(sorted(missing))}; read the images "
                        "with spark.read.format('binaryFile').load(...)")
    _workers_import_tfyard(df.sparkSession.sparkContext)
    _cap_batches(df.sparkSession.conf, job.options.batch_size * BATCHES_PER_ARROW_BATCH)
    job = replace(job, threads=int(df.sparkSession.conf.get("spark.task.cpus", "1")))
    added = from_arrow_schema(worker.predicted_schema())
    content = "content" if "content" in df.columns else None
    return df.mapInArrow(_scorer(job, content, scored), StructType(df.schema.fields + added.fields))


def _workers_import_tfyard(sc) -> None:
    """One line, not a task's ModuleNotFoundError deep in Spark's traceback, when the Python
    that Spark's workers run lacks tfyard: asked by a one-task job (importing nothing) once
    per application and Python."""
    key = (sc.applicationId, sc.pythonExec)
    if key in _importing:
        return
    found = sc.parallelize([0], 1).map(
        lambda _: __import__("importlib.util").util.find_spec("tfyard") is not None).collect()
    if not found[0]:
        raise UserError(f"Spark's Python workers ({sc.pythonExec}) cannot import tfyard; set "
                        "spark.pyspark.python (or PYSPARK_PYTHON) to a Python that has "
                        "tfyard installed, on every worker")
    _importing.add(key)


def _cap_batches(conf, rows: int) -> None:
    if int(conf.get(MAX_RECORDS)) > rows:
        conf.set(MAX_RECORDS, str(rows))


def _scorer(job: worker.Job, content: str | None, scored):
    def score_batches(batches):
        import pyarrow as pa

        added = worker.predicted_schema()
        counted = None if scored is None else scored.add
        for batch, columns in worker.scored(job, batches, "path", content, counted):
            yield pa.RecordBatch.from_arrays(batch.columns + columns,
                                             schema=pa.schema([*batch.schema, *added]))

    return score_batches
