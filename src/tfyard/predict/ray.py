"""`tfyard.ray.predict`: a Ray Dataset of encoded images (`read_binary_files(...,
include_paths=True)`'s `path` and `bytes`) -> a Dataset with the prediction columns added.

`map_batches` with a callable class runs a fixed pool of actors; each loads the model once,
in its constructor (`worker.py`), and scores every batch it is handed. Ray streams the
batches through the pool, so memory is a few batches per actor, however many files. The
actors share all CPUs but one, which is left to the read tasks (one CPU each): actors that
held every CPU would wait forever for batches nobody can read.

A Dataset of `path` alone has each image read by the actor's TensorFlow from that path (which
every actor must then read), and no bytes pass through Ray's object store. Each call is one
tf.data pipeline that fills and drains, so calls of paths, which weigh nothing, are 48 model
batches; calls of bytes, held in memory, 4 (`benchmarks/RESULTS.md` has both). Progress is
counted a model batch at a time, however long a call.
"""

from __future__ import annotations

from dataclasses import replace

from tfyard import keras_startup
from tfyard.predict import worker
from tfyard.predict.options import PredictOptions

BATCHES_PER_CALL = {"bytes": 4, "path": 48}


class Scorer:
    """One per actor: the model loaded at construction, then one call per batch, counted to
    `scored` (a Counter actor), when given, a model batch at a time."""

    def __init__(self, job: worker.Job, scored=None):
        keras_startup.skip_optional_imports()   # the actor's own process: as the CLI starts
        self.job, self.scored = job, scored
        worker.predictor(job)

    def __call__(self, table):
        if "path" not in table.column_names:
            raise worker.failure(f"the Dataset has {', '.join(table.column_names)}, not path "
                                  "(and bytes); read it with ray.data.read_binary_files(..., "
                                  "include_paths=True)")
        content = "bytes" if "bytes" in table.column_names else None
        schema = worker.predicted_schema()
        counted = None if self.scored is None else self.scored.add.remote
        scored = [columns for _, columns in worker.scored(self.job, [table], "path", content,
                                                          counted)]
        for field, column in zip(schema, scored[0] if scored else schema.empty_table().columns,
                                 strict=True):
            table = table.append_column(field, column)
        return table


class Counter:
    """The files scored so far: the Scorers add to it, `tfyard predict`'s bar reads it."""

    def __init__(self):
        self.files = 0

    def add(self, files: int) -> None:
        self.files += files

    def value(self) -> int:
        return self.files


def predict(ds, run, top_k: int = 5, batch_size: int = 32, on_error: str = "skip",
            workers: int | None = None):
    """`ds` with class_id, class_name, score, top_ids, top_names, top_scores and error
    added for each row's `bytes` (or, without them, the image at its `path`), as
    `tfyard predict` gives them (a null, empty or unreadable cell gets a row with an error);
    `workers` actors (default: one per CPU of the cluster), one CPU each."""
    options = PredictOptions(top_k, batch_size, on_error, workers).checked()
    scored = score(ds, worker.job(run, options), workers,
                   rows=batch_size * BATCHES_PER_CALL["bytes"])
    worker.said_if_empty(ds.limit(1).count() == 0, "the Dataset",
                         "check the paths given to ray.data.read_binary_files and any filter")
    return scored


def score_paths(paths: list[str], job: worker.Job, workers: int | None = None, scored=None):
    """`score` for the files at `paths`, which the actors read, in calls of up to 48 model
    batches, at least one per actor: each call a block of its own, as Ray would otherwise cut
    calls from bundles of blocks, handing each bundle's remainder over as a call of a few
    rows, which costs nearly a full call's pipeline. No more actors than model batches: each
    one costs a TensorFlow import and a model load (~10 s of a CPU) before its first row."""
    import ray

    workers = max(1, min(pool_size(workers), -(-len(paths) // job.options.batch_size)))
    calls = max(workers, -(-len(paths) // (job.options.batch_size * BATCHES_PER_CALL["path"])))
    ds = ray.data.from_items([{"path": path} for path in paths],
                             override_num_blocks=max(1, min(calls, len(paths))))
    return score(ds, job, workers, scored)


def pool_size(workers: int | None) -> int:
    """`workers`, or by default one actor per CPU of the cluster."""
    import ray

    return workers or max(1, int(ray.cluster_resources().get("CPU", 1)))


def score(ds, job: worker.Job, workers: int | None = None, scored=None,
          rows: int | None = None):
    """`predict` for a checked Job, counting to the Counter actor `scored` when given, in
    calls of `rows` rows (None: a block a call)."""
    import ray

    cpus, workers = ray.cluster_resources().get("CPU", 1), pool_size(workers)
    job = replace(job, threads=max(1, int(cpus // workers)))   # each actor's share
    return ds.map_batches(Scorer, fn_constructor_args=(job, scored), batch_format="pyarrow",
                          batch_size=rows, compute=ray.data.ActorPoolStrategy(size=workers),
                          num_cpus=max(0.0, min(1.0, (cpus - 1) / workers)))
