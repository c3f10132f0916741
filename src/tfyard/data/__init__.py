"""Dataset registry: `build_dataset(name, split, ...)` -> tf.data of (image, label) batches.

Importing this package does not import TensorFlow; each reader in `formats/` is
imported when first used. Dependencies point one way: this package -> inspect ->
formats -> pipeline/order/preprocess; nothing below imports the package back.
"""

from __future__ import annotations

import contextlib

from tfyard.data.formats import DATASETS, DatasetInfo, canonical, held, reader, streamed
from tfyard.data.formats.base import Preprocessing
from tfyard.data.pipeline import DatasetRequest, split_name
from tfyard.dtypes import DTYPES
from tfyard.errors import UserError
from tfyard.storage import readable_dir, stream

__all__ = ["DATASETS", "DatasetInfo", "Preprocessing", "build_dataset", "checked",
           "dataset_info", "local_data", "reader"]


def local_data(name: str, data_dir: str | None, work_dir: str | None,
               limit: int | None = None, refusal: str | None = None) -> str | None:
    """Where the readers open the `name` set `data_dir`: itself on local disk; in a bucket,
    copied once under `work_dir`, or, for a format whose shards stream and a set larger
    than `limit` bytes (None: half the free space), read through a bounded cache
    (`storage.stream`), unless `refusal` says why this run cannot (then one line)."""
    streams, holds = streamed(name), held(name)
    return readable_dir(data_dir, work_dir, streaming=streams and stream.Streaming(
        limit, streams, refusal, holds))


def dataset_info(name: str, data_dir: str | None = None, cache_dir: str | None = None,
                 **options) -> DatasetInfo:
    return reader(name).info(canonical(name), readable_dir(data_dir, cache_dir),
                             cache_dir=cache_dir, **options)


def build_dataset(name: str, split: str, data_dir: str | None = None, *, batch_size: int,
                  image_size: int | None = None, dtype: str = "float32", input_context=None,
                  repeat: bool | None = None, shuffle: bool | None = None,
                  seed: int | None = None, label_offset: int | None = None,
                  data_threads: int | None = None, skip_corrupt: bool = False,
                  cache_dir: str | None = None, num_examples: int | None = None,
                  start_example: int = 0, global_batch: int | None = None,
                  with_ids: bool = False, evaluation: bool = False):
    """Batches of (images [B,H,W,C] normalised in `dtype`, labels int32 [B], 0-based).

    `batch_size` is per replica. With a `seed` the stream is deterministic and
    step-addressable (`tfyard.data.order`): it starts at global example `start_example`
    (a resume passes step x `global_batch`), and `global_batch` (default `batch_size` x the
    context's replicas, or x its pipelines if more) fixes which slots of each global batch
    this input pipeline fills. `with_ids` (seeded only) adds a third element, the int64 ids
    of the examples in each batch (record number in file order). Without a seed the
    start is ignored and the order is today's fast buffer shuffle. `evaluation` reads any
    split, the training one too, as evaluation does: one pass in order, the evaluation view,
    the last partial batch kept (`tfyard evaluate --split train`).
    """
    module = reader(name)
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    if batch_size < 1:
        raise UserError(f"batch size must be at least 1, got {batch_size}")
    if with_ids and seed is None:
        raise UserError("example ids (with_ids) need a seed: only a seeded order is addressed")
    request = DatasetRequest(
        split=split_name(split), batch_size=batch_size, image_size=image_size, dtype=dtype,
        input_context=input_context, repeat=repeat, shuffle=shuffle, seed=seed,
        label_offset=label_offset, data_threads=data_threads, skip_corrupt=skip_corrupt,
        cache_dir=cache_dir, num_examples=num_examples, start_example=start_example,
        global_batch=global_batch, with_ids=with_ids, evaluation=evaluation)
    if request.deterministic:
        from tfyard.data.order import Layout

        Layout.of(request)  # a bad start or global batch is a UserError before TF work
    import tensorflow as tf

    # The input functions are plain graph code: built without AutoGraph, every process
    # saves the second or so it spends converting them from source.
    return tf.autograph.experimental.do_not_convert(module.build)(
        name, readable_dir(data_dir, cache_dir), request)


@contextlib.contextmanager
def checked(name: str, data_dir: str | None = None, split: str = "train",
            cache_dir: str | None = None):
    """Turn a data error raised while iterating into a UserError naming file and record.

    TensorFlow's decode errors do not say which record failed, so on failure the split is
    scanned (the same check as `tfyard data inspect --verify`) to find the first bad one;
    if none is found the original error is re-raised. A bucket's cache that failed to fetch
    a file (`storage.stream`) is named by its own line.
    """
    import tensorflow as tf

    try:
        yield
    except tf.errors.OpError as exc:
        fetching = stream.failure(getattr(exc, "message", None) or str(exc))
        if fetching is not None:
            raise fetching from None
        if not isinstance(exc, (tf.errors.InvalidArgumentError, tf.errors.DataLossError)):
            raise
        from tfyard.data.inspect import first_problem

        problem = first_problem(name, data_dir, split_name(split), cache_dir=cache_dir)
        if problem is None:  # the data is fine: not a data error, keep the traceback
            raise
        raise UserError(f"{problem}; fix or re-convert the data, or pass --skip_corrupt to "
                        "drop bad records") from exc
