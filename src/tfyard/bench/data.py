"""Input pipeline throughput alone: tfyard's `build_dataset` batches, no model."""

from __future__ import annotations

import statistics
import time

from tfyard.data import build_dataset, local_data
from tfyard.data.release import release


def measure(dataset: str, data_dir: str | None, batch_size: int, image_size: int | None,
            windows: int = 5, window_batches: int = 10, warmup_batches: int = 5,
            data_threads: int | None = None, dtype: str = "float32",
            data_cache_limit: int | None = None) -> dict:
    """Images/sec of the training split: median of `windows` windows after a warm-up
    (the first batch, which also gives the image size, plus `warmup_batches`); a set in a
    bucket is read as training reads it, through the data cache when it is larger."""
    local = local_data(dataset, data_dir, None, data_cache_limit)
    pipeline = build_dataset(dataset, "train", local, batch_size=batch_size,
                             image_size=image_size, dtype=dtype, data_threads=data_threads)
    iterator = iter(pipeline)
    size = int(next(iterator)[0].shape[1])
    for _ in range(warmup_batches):
        next(iterator)
    rates = []
    for _ in range(windows):
        started = time.perf_counter()
        for _ in range(window_batches):
            next(iterator)
        rates.append(window_batches * batch_size / (time.perf_counter() - started))
    release(iterator)   # a long measurement's iterator may take TensorFlow a minute to delete
    return {"dataset": dataset, "data": data_dir or dataset, "batch_size": batch_size,
            "image_size": size, "dtype": dtype,
            "warmup_batches": warmup_batches, "windows": windows,
            "window_batches": window_batches, "images_per_sec": statistics.median(rates)}
