"""`tfyard train` end to end: platform, role, strategy, data, model, loop, outputs.

`run(argv)` is the entry point for the seed scripts and for Spark tasks; `train(options)`
does the work and returns the run summary.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from dataclasses import dataclass

from tfyard import platform as platform_contract
from tfyard.data import build_dataset, checked, dataset_info
from tfyard.distribute import strategy as strategies
from tfyard.distribute.cluster import load_cluster_config
from tfyard.distribute.watchdog import StartupWatchdog
from tfyard.errors import UserError
from tfyard.models import create_model, get_spec
from tfyard.train.options import TrainOptions, parse_train_args, resolve_numbers


def run(argv: list[str] | None = None, prog: str = "tfyard train") -> int:
    """Parse a training command line (classic spellings included) and train."""
    train(parse_train_args(argv, prog=prog))
    return 0


@dataclass
class Prepared:
    """Everything a training process builds before its first step."""

    plat: object
    cluster: object
    plan: object
    info: object
    spec: object
    strategy: object
    numbers: object
    shape: tuple[int, int, int]
    policy: str | None
    model: object
    optimizer: object
    setup: object

    @property
    def replicas(self) -> int:
        return self.numbers.global_batch // self.numbers.per_replica_batch


def prepare(options: TrainOptions, plat, cluster, plan, info, spec) -> Prepared:
    """Strategy, batch arithmetic, model, optimizer and the loop's set-up for one process."""
    import keras

    from tfyard.train.loop import LoopSetup, evaluate_model
    from tfyard.train.optim import make_optimizer

    strategies.configure_cpu_replicas(options.cpu_replicas)
    if options.seed is not None:
        keras.utils.set_random_seed(options.seed)
    strategy = strategies.create_strategy(plan, cluster, plat.num_gpus)
    replicas = strategy.num_replicas_in_sync if plan.strategy != "parameter_server" \
        else cluster.num_workers
    numbers = resolve_numbers(options, spec.family, replicas, info.num_examples["train"])
    shape = model_input_shape(info, options.image_size)
    policy = None if options.dtype == "float32" else f"mixed_{options.dtype}"
    with strategy.scope():
        model = create_model(spec.name, info.num_classes, shape, dtype_policy=policy,
                             zero_init_residual=options.zero_init_residual)
        if options.sync_batch_norm:
            synchronize_batch_norm(model)
        optimizer = make_optimizer(numbers, options.momentum, options.nesterov, options.dtype)
        optimizer.build(model.trainable_variables)

    # Parameter-server workers all run the same dataset function: a fixed seed would feed
    # every worker the same batches, so their asynchronous updates would repeat each other.
    data_seed = None if plan.strategy == "parameter_server" else options.seed

    def train_dataset(context, seed_offset):
        return build_dataset(
            options.dataset, "train", plat.data_dir,
            batch_size=context.get_per_replica_batch_size(numbers.global_batch),
            image_size=shape[0], dtype=options.dtype, input_context=context,
            seed=None if data_seed is None else data_seed + seed_offset,
            label_offset=options.label_offset, data_threads=options.data_threads,
            skip_corrupt=options.skip_corrupt, cache_dir=plat.work_dir)

    def evaluate():
        dataset = build_dataset(
            options.dataset, "validation", plat.data_dir, batch_size=numbers.per_replica_batch,
            image_size=shape[0], dtype=options.dtype, label_offset=options.label_offset,
            data_threads=options.data_threads, skip_corrupt=options.skip_corrupt,
            cache_dir=plat.work_dir)
        with checked(options.dataset, plat.data_dir, "validation", cache_dir=plat.work_dir):
            return evaluate_model(model, dataset, info.num_classes)

    eval_steps = round(options.eval_every_epochs * numbers.steps_per_epoch) \
        if options.eval_every_epochs else None
    setup = LoopSetup(
        strategy=strategy, numbers=numbers, num_classes=info.num_classes,
        label_smoothing=options.label_smoothing,
        l2_decay=numbers.weight_decay if numbers.optimizer == "sgd" else 0.0,
        jit_compile=use_xla(options, plan, model), steps_per_loop=options.steps_per_loop,
        checkpoint_every_steps=options.checkpoint_every_steps,
        eval_every_steps=max(1, eval_steps) if eval_steps is not None else None,
        train_dataset_fn=train_dataset,
        evaluate=evaluate if cluster.is_coordinator else None)
    return Prepared(plat, cluster, plan, info, spec, strategy, numbers, shape, policy, model,
                    optimizer, setup)


def use_xla(options: TrainOptions, plan, model) -> bool:
    """--jit_compile as given; by default on wherever it is safe, as Keras `fit` does."""
    if options.jit_compile is not None:
        return options.jit_compile
    # Remote (PS) variables and cross-replica batch norm cannot live inside an XLA cluster.
    if plan.strategy == "parameter_server" or options.sync_batch_norm:
        return False
    return all(layer.supports_jit for layer in model._flatten_layers())


def train(options: TrainOptions) -> dict | None:
    """Train as this process's role says; returns the summary (None for servers)."""
    plat = platform_contract.resolve(options.data_dir, options.output_dir, options.work_dir,
                                     options.log_dir, options.num_gpus)
    cluster = load_cluster_config()
    __import__("tfyard.distribute.heartbeat", fromlist=["_"]).start_from_env()  # launcher watch
    plan = strategies.choose(cluster, plat.num_gpus, options.ds)
    if plan.behaviour == "serve":
        strategies.serve(cluster, startup_timeout=options.startup_timeout)
        return None
    info = dataset_info(options.dataset, plat.data_dir, cache_dir=plat.work_dir)
    spec = get_spec(options.model)
    if plan.behaviour == "evaluate":
        from tfyard.train.evaluate import run_sidecar

        return run_sidecar(options, plat, info, spec)
    import tensorflow as tf

    from tfyard.train.checkpoint import Checkpoints
    from tfyard.train.evaluate import RUN_FILE
    from tfyard.train.loop import Trainer
    from tfyard.train.report import Reporter, write_json_atomic

    watchdog = StartupWatchdog(cluster, options.startup_timeout).start()
    run = prepare(options, plat, cluster, plan, info, spec)
    numbers, model, replicas, shape = run.numbers, run.model, run.replicas, run.shape
    writes = cluster.is_coordinator
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    checkpoints = Checkpoints(os.path.join(plat.output_dir, "checkpoints"), writes,
                              options.keep_checkpoints, model=model, optimizer=run.optimizer,
                              step=step)
    if writes:
        write_json_atomic(os.path.join(plat.output_dir, RUN_FILE),
                          {**dataclasses.asdict(options), **plat.as_dict()})
    restored = checkpoints.restore_latest()
    start = int(step.numpy())
    say = (lambda text: None) if options.quiet else (lambda text: print(text, flush=True))
    say(f"tfyard: {spec.name} on {options.dataset} ({info.num_classes} classes, "
        f"{shape[0]}x{shape[1]}x{shape[2]}), {plan.strategy} with {replicas} replica(s) "
        f"[{plan.reason}]{', XLA' if run.setup.jit_compile else ''}")
    say(f"tfyard: global batch {numbers.global_batch} = {numbers.per_replica_batch} per "
        f"replica x {replicas}; lr {numbers.learning_rate:.4g} {numbers.optimizer} "
        f"{numbers.lr_schedule}; {numbers.total_steps} steps ({numbers.steps_per_epoch}/epoch)")
    say(f"tfyard: resumed from step {start} ({restored})" if restored
        else "tfyard: starting from step 0 (no checkpoint)")
    coordinator = None
    if plan.strategy == "parameter_server":
        coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(run.strategy)
    reporter = Reporter(plat.output_dir, plat.log_dir, writes, options.quiet,
                        numbers.total_steps, numbers.steps_per_epoch)
    trainer = Trainer(run.setup, model, run.optimizer, step, checkpoints, reporter, coordinator)
    started = time.time()
    try:
        with checked(options.dataset, plat.data_dir, "train", cache_dir=plat.work_dir):
            trainer.train(on_first_chunk=watchdog.stop)
    finally:
        watchdog.stop()
        reporter.close()
        checkpoints.close()
    summary = {
        "model": spec.name, "dataset": options.dataset, "num_classes": info.num_classes,
        "strategy": plan.strategy, "replicas": replicas, "role": cluster.role,
        "global_batch": numbers.global_batch, "per_replica_batch": numbers.per_replica_batch,
        "learning_rate": numbers.learning_rate, "optimizer": numbers.optimizer,
        "dtype": options.dtype, "jit_compile": run.setup.jit_compile,
        "total_steps": numbers.total_steps,
        "final_step": int(step.numpy()), "resumed_from_step": start,
        "steps_per_epoch": numbers.steps_per_epoch,
        "epochs": int(step.numpy()) / numbers.steps_per_epoch,
        "wall_time_sec": time.time() - started,
        "mean_images_per_sec": _mean_rate(trainer.images_per_sec),
        "train": trainer.last_train, "eval": trainer.last_eval,
    }
    summary["weights_digest"] = weights_digest(model)
    member = f"{cluster.role}-{cluster.task_index}" if cluster.jobs else "single"
    platform_contract.make_dirs(os.path.join(plat.work_dir, "members"))
    write_json_atomic(os.path.join(plat.work_dir, "members", f"{member}.json"), summary)
    if writes and options.skip_corrupt:
        from tfyard.data.inspect import problems

        summary["skipped_records"] = sum(1 for _ in problems(
            options.dataset, plat.data_dir, "train", cache_dir=plat.work_dir))
        say(f"tfyard: --skip_corrupt dropped the {summary['skipped_records']} unusable "
            "training record(s) (`tfyard data inspect --verify` lists them)")
    if writes:
        if options.export:
            from tfyard.train.export import export_model

            summary["export"] = export_model(model, spec.name, info.num_classes, shape, run.policy,
                                             os.path.join(plat.output_dir, "export"))
        write_json_atomic(os.path.join(plat.output_dir, "summary.json"), summary)
        say(f"tfyard: done at step {summary['final_step']}; "
            + (f"validation top1 {trainer.last_eval['top1']:.4f}; " if trainer.last_eval else "")
            + f"{summary['mean_images_per_sec']:.0f} images/sec; outputs in {plat.output_dir}")
    return summary


def weights_digest(model) -> str:
    """SHA-256 of all weights, so members of a synchronous job can be compared exactly."""
    digest = hashlib.sha256()
    for weight in model.get_weights():
        digest.update(weight.tobytes())
    return digest.hexdigest()


def _mean_rate(rates: list[float]) -> float:
    """Mean images/sec, leaving out the first report (tracing and warm-up) when possible."""
    steady = rates[1:] or rates
    return sum(steady) / len(steady) if steady else 0.0


def model_input_shape(info, image_size: int | None) -> tuple[int, int, int]:
    height, width, channels = info.image_shape
    if image_size:
        height = width = image_size
    return (height, width, channels)


def synchronize_batch_norm(model) -> None:
    """Make every batch-norm layer compute its statistics over all replicas."""
    import keras

    layers = [layer for layer in model._flatten_layers()
              if isinstance(layer, keras.layers.BatchNormalization)]
    if not layers:
        raise UserError(f"--sync_batch_norm: {model.name} has no batch-norm layers; drop the flag")
    for layer in layers:
        layer.synchronized = True
