"""What a training start says and records about itself: run.json's record of how it trains
(`run_record`, `run_shape`, which MLflow's params are made of), its first lines (`announce`)
and, at the end, its summary (`finish`: each member's, the chief's summary.json with
`weights_digest`, and the last line). `job` runs the training; this is its account.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING

from tfyard import tracking
from tfyard.distribute.devices import describe_devices
from tfyard.errors import PAUSED, PREEMPTED
from tfyard.runfiles.layout import RunDirectory, WorkDirectory
from tfyard.storage import stream

if TYPE_CHECKING:  # build imports TensorFlow
    from tfyard.train.build import Prepared
    from tfyard.train.controller import RunState

log = logging.getLogger("tfyard")


def member_name(cluster) -> str:
    return f"{cluster.role}-{cluster.task_index}" if cluster.jobs else "single"

def run_record(prepared: Prepared) -> dict:
    """run.json: the options, the platform, what is trained, the numbers the chief
    resolved (the evaluator side-car reads them rather than guessing) and how it trains
    (`run_shape`). MLflow's params are made of it alone, live and by `tfyard track`."""
    numbers, context, task = prepared.numbers, prepared.context, prepared.task
    return {**context.options.to_dict(), **context.plat.as_dict(), **task.identity(),
            "mlflow_uri": tracking.redacted(context.options.mlflow_uri),
            "eval_data": task.data.eval_name, "class_names": list(task.class_names),
            "preprocessing": task.preprocessing and task.preprocessing.to_dict(),
            "total_steps": numbers.total_steps,
            "steps_per_epoch": numbers.steps_per_epoch, "global_batch": numbers.global_batch,
            "warmup_steps": numbers.warmup_steps,
            "per_replica_batch": numbers.per_replica_batch, "init": prepared.init,
            "dtype_reason": context.dtype_reason,
            **run_shape(prepared)}


def run_shape(prepared: Prepared) -> dict:
    """The strategy, the cluster, the GPUs, the examples and the versions a start trained
    with: known only while it trains, so run.json keeps them for a later `tfyard track`."""
    from importlib.metadata import version

    import tensorflow as tf

    context = prepared.context
    cluster = context.cluster
    return {"strategy": context.plan.strategy, "replicas": prepared.replicas,
            "workers": max(cluster.num_workers, 1), "ps": len(cluster.jobs.get("ps", ())),
            "gpus": context.plat.num_gpus, "train_examples": prepared.task.data.train_examples,
            "tfyard_version": version("tfyard"), "tensorflow_version": tf.__version__}


# What --seed keeps on a GPU: TensorFlow's GPU kernels (cuDNN's algorithms, XLA's and the
# kernels' atomic sums) are not deterministic unless op determinism is on, which refuses
# the step's timing ops; so a resumed run is not promised bit-exact there.
GPU_SEED = ("; --seed on a GPU: the same examples in the same order, the weights not bit "
            "for bit (GPU kernels are not deterministic)")


def announce(prepared: Prepared, restored: str | None, start: int, tracker) -> None:
    numbers, shape, plan = prepared.numbers, prepared.shape, prepared.context.plan
    identity, replicas = prepared.task.identity(), prepared.replicas
    options, gpus = prepared.context.options, prepared.context.plat.num_gpus
    xla = "XLA" if prepared.trainer.config.jit_compile else "no XLA"
    log.info(f"tfyard: {identity['model']} on {identity['dataset']} "
             f"({identity['num_classes']} classes, "
             f"{shape[0]}x{shape[1]}x{shape[2]}), {plan.strategy} with {replicas} "
             f"replica(s) [{plan.reason}], {options.dtype} "
             f"({prepared.context.dtype_reason}), {xla}, "
             f"{describe_devices(gpus)}"
             f"{GPU_SEED if gpus and options.seed is not None else ''}")
    log.info(f"tfyard: global batch {numbers.global_batch or 'as the input gives'} = "
             f"{numbers.per_replica_batch or 'its batches'} per "
             f"replica x {replicas}; lr {numbers.learning_rate:.4g} {numbers.optimizer} "
             f"{numbers.lr_schedule}; {numbers.total_steps} steps "
             f"({numbers.steps_per_epoch}/epoch)")
    log.info(f"tfyard: resumed from step {start} ({restored})" if restored
             else "tfyard: starting from step 0 (no checkpoint)")
    if tracker:
        log.info(f"tfyard: {tracker.where}")


def finish(prepared: Prepared, state: RunState) -> dict:
    """The summary: every member's into work_dir/members, the chief's into summary.json."""
    from tfyard.train.rundir.report import write_json_atomic

    context, numbers = prepared.context, prepared.numbers
    options, plat, cluster = context.options, context.plat, context.cluster
    summary = {
        **prepared.task.identity(), "strategy": context.plan.strategy,
        "replicas": prepared.replicas, "role": cluster.role,
        "global_batch": numbers.global_batch, "per_replica_batch": numbers.per_replica_batch,
        "learning_rate": numbers.learning_rate, "optimizer": numbers.optimizer,
        "dtype": options.dtype, "jit_compile": prepared.trainer.config.jit_compile,
        "total_steps": numbers.total_steps, "final_step": state.step,
        "resumed_from_step": state.start_step, "steps_per_epoch": numbers.steps_per_epoch,
        "epochs": state.epoch, "wall_time_sec": state.elapsed(),
        "mean_images_per_sec": state.mean_rate(), "stop_reason": state.stop_reason,
        "train": state.metrics or None, "eval": state.eval,
        "weights_digest": weights_digest(prepared.model),
    }
    if "export" in state.outputs:
        summary["export"] = state.outputs["export"]
    if caches := stream.figures(plat.work_dir):   # data read from a bucket through a bounded cache
        summary["data_cache"] = caches
    work = WorkDirectory(plat.work_dir)
    work.files.make_directory(work.members)
    write_json_atomic(work.member_summary(member_name(cluster)), summary)
    if not cluster.is_coordinator:
        return summary
    if options.skip_corrupt:
        from tfyard.data import local_data
        from tfyard.data.inspect import problems

        # the training's own copy or cache of a bucket's data (`local_data`), not a new one
        summary["skipped_records"] = sum(1 for _ in problems(options.dataset, local_data(
            options.dataset, plat.data_dir, plat.work_dir, options.data_cache_limit), "train",
            cache_dir=plat.work_dir))
        log.info(f"tfyard: --skip_corrupt dropped the {summary['skipped_records']} unusable "
                 "training record(s) (`tfyard data inspect --verify` lists them)")
    write_json_atomic(RunDirectory(plat.output_dir).summary, summary)
    if state.stop_reason in (PREEMPTED, PAUSED):
        return summary  # exit_preempted or _exit_paused says so
    log.info(f"tfyard: done at step {state.step}; "
             + (f"validation {_headline(state.eval)}; " if state.eval else "")
             + (f"{summary['mean_images_per_sec']:.0f} images/sec; " if state.rates else "")
             + f"outputs in {plat.output_url or plat.output_dir}")
    return summary


def _headline(figures: dict) -> str:
    """The evaluation's main figure: top-1, else the first metric after the loss."""
    name = "top1" if "top1" in figures else next((k for k in figures if k != "loss"), "loss")
    return f"{name} {figures[name]:.4f}"

def weights_digest(model) -> str:
    """SHA-256 of all weights, so members of a synchronous job can be compared exactly."""
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(weight.tobytes())
    return digest.hexdigest()
