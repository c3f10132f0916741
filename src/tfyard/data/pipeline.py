"""One tf.data recipe for every reader: shard, interleave, shuffle, parallel decode, batch.

Readers supply a source (file names or in-memory records) and a per-record `decode`;
this module owns the performance choices so they are made once.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfyard.errors import UserError

SPLITS = {"train": "train", "validation": "validation", "test": "validation"}
CYCLE = 16   # files read at once by interleave (`formats.tfrecord.held` counts evaluation's)


@dataclass(frozen=True, kw_only=True)
class DatasetRequest:
    """The caller's request, as `build_dataset` received it (split already normalised)."""

    split: str
    batch_size: int
    image_size: int | None = None
    dtype: str = "float32"
    input_context: object = None
    repeat: bool | None = None
    shuffle: bool | None = None
    seed: int | None = None
    label_offset: int | None = None
    data_threads: int | None = None
    skip_corrupt: bool = False
    cache_dir: str | None = None
    num_examples: int | None = None
    start_example: int = 0
    global_batch: int | None = None
    with_ids: bool = False
    evaluation: bool = False   # any split read as evaluation reads it: once, in order, whole

    @property
    def deterministic(self) -> bool:
        """A seed makes order and augmentation functions of position (`tfyard.data.order`)."""
        return self.seed is not None

    @property
    def training(self) -> bool:
        """The training view: augmented, shuffled, repeated, whole batches only."""
        return self.split == "train" and not self.evaluation

    @property
    def shuffled(self) -> bool:
        return self.training if self.shuffle is None else self.shuffle

    @property
    def repeated(self) -> bool:
        return self.training if self.repeat is None else self.repeat

    @property
    def pipelines(self) -> tuple[int, int]:
        """(number of input pipelines, this pipeline's index)."""
        ctx = self.input_context
        return (ctx.num_input_pipelines, ctx.input_pipeline_id) if ctx else (1, 0)


def split_name(split: str) -> str:
    try:
        return SPLITS[split]
    except KeyError:
        raise UserError(f"unknown split {split!r}; use one of train, validation, test") from None


def assemble(source, decode, spec: DatasetRequest, *, open_file=None, num_files: int = 0,
             cache: bool = False, shuffle_buffer: int = 10_000, announce=None):
    """Turn `source` into batches of (image, label).

    With `open_file`, `source` holds file names read by interleave (`fetched.interleaved`),
    sharded by file when every pipeline gets at least one; otherwise it holds records,
    sharded by record.
    `announce` (`data.fetched`) is told each pass's file names in reading order.
    """
    import tensorflow as tf

    from tfyard.data.fetched import interleaved

    autotune = tf.data.AUTOTUNE
    count, index = spec.pipelines
    by_file = open_file is not None and num_files >= count
    # Order only matters where the caller asked for it: no shuffling, or a fixed seed.
    ordered = not spec.shuffled or spec.seed is not None
    if count > 1 and by_file:
        source = source.shard(count, index)
    records = source
    if open_file is not None:
        if spec.shuffled:
            source = source.shuffle(max(num_files, 1), seed=spec.seed)
        if announce is not None:
            source = source.batch(max(num_files, 1)).map(announce).unbatch()
        # streamed with no order to keep, one file is open at a time (`tfrecord.held`)
        cycle = 1 if announce is not None and not ordered else min(max(num_files, 1), CYCLE)
        records = interleaved(source, open_file, announce is not None, cycle, autotune,
                              deterministic=ordered)
    if count > 1 and not by_file:
        records = records.shard(count, index)
    if cache:
        records = records.cache()
    if spec.shuffled:
        records = records.shuffle(shuffle_buffer, seed=spec.seed)
    if spec.repeated:
        records = records.repeat()
    dataset = records.map(decode, num_parallel_calls=spec.data_threads or autotune,
                          deterministic=ordered)
    return _batched(dataset, spec, ordered)


def addressed(stream, decode, spec: DatasetRequest):
    """Seeded path: `stream` yields (global example number, id, *record) in order
    (`tfyard.data.order`); `decode(*record, seed=...)` augments from the example's seed."""
    import tensorflow as tf

    from tfyard.data.order import example_seed

    def view(number, ids, *record):
        image, label = decode(*record, seed=example_seed(spec.seed, number))
        return (image, label, ids) if spec.with_ids else (image, label)

    dataset = stream.map(view, num_parallel_calls=spec.data_threads or tf.data.AUTOTUNE,
                         deterministic=True)
    return _batched(dataset, spec, True)


def _batched(dataset, spec: DatasetRequest, ordered: bool):
    import tensorflow as tf

    if spec.skip_corrupt:
        dataset = dataset.ignore_errors(log_warning=True)
    dataset = dataset.batch(spec.batch_size, drop_remainder=spec.training)
    return finish(dataset.prefetch(tf.data.AUTOTUNE), spec, ordered)


def finish(dataset, spec: DatasetRequest, ordered: bool = True):
    """Options every pipeline shares: determinism, thread pool, no second auto-sharding."""
    import tensorflow as tf

    options = tf.data.Options()
    options.deterministic = ordered
    options.experimental_optimization.map_parallelization = True
    if spec.data_threads:
        options.threading.private_threadpool_size = spec.data_threads
    if spec.input_context is not None:
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
    return dataset.with_options(options)
