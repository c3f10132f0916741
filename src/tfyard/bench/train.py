"""Training throughput of tfyard's own loop (`train.loop.Trainer`), warm-up excluded.

`tfyard train` runs the Trainer under a Controller that also checkpoints, reports,
evaluates and exports; a benchmark wants only the steps, so it drives the same Trainer
(same strategy, model, optimizer, step) directly, with no files.
"""

from __future__ import annotations

import math
import os
import resource
import statistics
import tempfile

from tfyard import platform
from tfyard.distribute import strategy as strategies
from tfyard.distribute.cluster import load_cluster_config
from tfyard.distribute.devices import describe_devices
from tfyard.errors import UserError
from tfyard.process.cpus import usable_cpus
from tfyard.train.options import TrainOptions


def pin_to_core() -> int:
    """Pin this process to one CPU core (its place in the cluster) and TF to one thread.

    Must run before TensorFlow starts its thread pools; returns the core.
    """
    cluster = load_cluster_config()
    place = cluster.task_index + (cluster.role == "worker" and "chief" in cluster.jobs)
    cores = usable_cpus()
    core = cores[place % len(cores)]
    os.sched_setaffinity(0, {core})
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)  # collectives need a second
    return core


def steady_windows(rates: list[float], warmup_windows: int) -> list[float]:
    """The per-window images/sec left after dropping the warm-up windows."""
    steady = rates[warmup_windows:]
    if not steady:
        raise UserError("no timed windows after warm-up; raise --steps")
    return steady


def prepare_member(options: TrainOptions, scratch: str | None = None):
    """The same set-up `tfyard train` builds (strategy, model, optimizer, Trainer), no files;
    returns (prepared, platform, cluster, plan). The record counts of the data are cached in
    `options.work_dir` when the user gives one, else under `scratch` (a temporary directory)."""
    plat = platform.resolve(options.data_dir, output_dir=scratch, work_dir=options.work_dir,
                            num_gpus=options.num_gpus, create=False)
    cluster = load_cluster_config()
    plan = strategies.choose(cluster, plat.num_gpus, options.ds)
    if plan.behaviour != "train":
        raise UserError(f"bench runs training members only, not a {cluster.role}; "
                        "drop ps/evaluator from TF_CONFIG")
    from tfyard.train.build import RunContext, prepare, settle_dtype, start_strategy
    from tfyard.train.task.task import make_task

    strategy = start_strategy(RunContext(options, plat, cluster, plan))
    context = settle_dtype(RunContext(options, plat, cluster, plan), options.startup_timeout)
    prepared = prepare(context, make_task(context.options, plat), strategy)
    return prepared, plat, cluster, plan


def measure(options: TrainOptions, warmup_steps: int, profile_dir: str | None = None) -> dict:
    """Train `options.train_steps` timed steps after `warmup_steps`; return the figures. The
    caches live in a temporary directory unless a work dir is given: nothing in the cwd."""
    with tempfile.TemporaryDirectory(prefix="tfyard-bench-") as scratch:
        return _measure(options, warmup_steps, profile_dir, scratch)


def _measure(options: TrainOptions, warmup_steps: int, profile_dir: str | None,
             scratch: str) -> dict:
    import tensorflow as tf

    total = warmup_steps + options.train_steps
    prepared, plat, cluster, plan = prepare_member(options.with_updates(train_steps=total),
                                                   scratch)
    trainer, numbers = prepared.trainer, prepared.numbers
    rates = []
    if profile_dir:
        tf.profiler.experimental.start(profile_dir)
    try:
        done = 0
        while done < total:  # only the steps: no checkpoints, reports or evaluation
            steps = trainer.chunk_steps(total - done)
            rates.append(trainer.train(steps)["images_per_sec"])
            done += steps
    finally:
        if profile_dir:
            tf.profiler.experimental.stop()
    windows = steady_windows(rates, math.ceil(warmup_steps / options.steps_per_loop))
    rate = statistics.median(windows)
    dtype = prepared.context.options.dtype
    return {
        "model": prepared.task.identity()["model"], "data": plat.data_dir or options.dataset,
        "image_size": prepared.shape[0], "dtype": dtype,
        "dtype_reason": prepared.context.dtype_reason,
        "jit_compile": trainer.config.jit_compile, "strategy": plan.strategy,
        "devices": describe_devices(plat.num_gpus),
        "replicas": prepared.replicas, "workers": max(1, cluster.num_workers),
        "global_batch": numbers.global_batch, "per_replica_batch": numbers.per_replica_batch,
        "steps_per_loop": options.steps_per_loop, "warmup_steps": warmup_steps,
        "timed_steps": options.train_steps, "windows": len(windows),
        "window_images_per_sec": windows,
        "images_per_sec": rate, "step_time_ms": 1000.0 * numbers.global_batch / rate,
        **peak_memory(plat.num_gpus),
        **flop_rates(prepared.model, numbers.global_batch, rate, plat.num_gpus, dtype),
    }


def flop_rates(model, global_batch: int, images_per_sec: float, num_gpus: int,
               dtype: str) -> dict:
    """FLOPs a step (counted from the layers), FLOP/s achieved, the devices' peak in `dtype`
    and the fraction reached, each count saying how it was made."""
    from tfyard.bench import flops, peak
    from tfyard.distribute.devices import gpu_cards

    per_step = flops.step_flops(model, global_batch)
    achieved = per_step and per_step * images_per_sec / global_batch
    top = peak.this_machine(gpu_cards(num_gpus), dtype)
    return {"flops_per_step": per_step, "flops_how": flops.HOW if per_step else
            "not counted: a layer does not say its output shape (a subclassed model)",
            "achieved_flops_per_sec": achieved, "peak_flops_per_sec": top.flops_per_sec,
            "peak_how": top.how,
            "peak_fraction": achieved / top.flops_per_sec if achieved and top.flops_per_sec
            else None}


def peak_memory(num_gpus: int) -> dict:
    """Peak memory of the first GPU, or on CPU-only hosts this process's peak RSS."""
    if num_gpus:
        import tensorflow as tf

        return {"peak_memory_bytes": tf.config.experimental.get_memory_info("GPU:0")["peak"],
                "peak_memory_of": "GPU:0"}
    return {"peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "peak_memory_of": "host RSS (no GPU)"}
