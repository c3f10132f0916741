"""Everything a training process builds before its first step: strategy, batch arithmetic,
model, optimizer, input and evaluation functions, and the `Trainer`. No files are written.
"""

from __future__ import annotations

from dataclasses import dataclass

import keras

from tfyard.data import build_dataset, checked
from tfyard.distribute import strategy as strategies
from tfyard.errors import UserError
from tfyard.models import create_model
from tfyard.train.loop import StepConfig, Trainer, evaluate_model
from tfyard.train.optim import make_optimizer
from tfyard.train.options import Resolved, TrainOptions, resolve_numbers


@dataclass
class Prepared:
    """One process's training set-up; `evaluate` runs on the validation split."""

    strategy: object
    numbers: Resolved
    replicas: int
    shape: tuple[int, int, int]
    policy: str | None
    model: object
    optimizer: object
    trainer: Trainer
    evaluate: object
    eval_every_steps: int | None


def dtype_policy(dtype: str) -> str | None:
    return None if dtype == "float32" else f"mixed_{dtype}"


def model_input_shape(info, image_size: int | None) -> tuple[int, int, int]:
    height, width, channels = info.image_shape
    if image_size:
        height = width = image_size
    return (height, width, channels)


def prepare(options: TrainOptions, plat, cluster, plan, info, spec) -> Prepared:
    """Strategy, batch arithmetic, model, optimizer and the Trainer for one process."""
    strategies.configure_cpu_replicas(options.cpu_replicas)
    if options.seed is not None:
        keras.utils.set_random_seed(options.seed)
    strategy = strategies.create_strategy(plan, cluster, plat.num_gpus)
    replicas = strategy.num_replicas_in_sync if plan.strategy != "parameter_server" \
        else cluster.num_workers
    numbers = resolve_numbers(options, spec.family, replicas, info.num_examples["train"])
    shape = model_input_shape(info, options.image_size)
    policy = dtype_policy(options.dtype)
    with strategy.scope():
        model = create_model(spec.name, info.num_classes, shape, dtype_policy=policy,
                             zero_init_residual=options.zero_init_residual)
        if options.sync_batch_norm:
            synchronize_batch_norm(model)
        optimizer = make_optimizer(numbers, options.momentum, options.nesterov, options.dtype)
        optimizer.build(model.trainable_variables)
    config = StepConfig(
        num_classes=info.num_classes, global_batch=numbers.global_batch,
        label_smoothing=options.label_smoothing,
        weight_decay=numbers.weight_decay if numbers.optimizer == "sgd" else 0.0,
        jit_compile=use_xla(options, plan, model), steps_per_loop=options.steps_per_loop,
        skip_nonfinite=options.skip_nonfinite_steps > 0)
    trainer = Trainer(strategy, model, optimizer, config,
                      _train_input(options, plat, plan, numbers, shape),
                      record_ids=options.record_example_ids)
    eval_steps = round(options.eval_every_epochs * numbers.steps_per_epoch) \
        if options.eval_every_epochs else None
    return Prepared(strategy, numbers, replicas, shape, policy, model, optimizer, trainer,
                    _evaluation(options, plat, numbers, shape, model, info.num_classes),
                    max(1, eval_steps) if eval_steps is not None else None)


def _train_input(options: TrainOptions, plat, plan, numbers: Resolved, shape):
    """`train_dataset(context, start_step)`. With --seed the stream is addressed by global
    example number (`tfyard.data.order`) and starts at start_step x global batch, so a
    resumed run reads exactly what an unbroken one would: every example once per epoch.

    Parameter-server workers keep an unseeded per-worker shuffle: TensorFlow 2.21 gives each
    of them the same InputContext(1, 0, R) and the same graph, so a seeded stream would feed
    every worker the same batches, and no worker can know which part of it is its own.
    """
    seed = None if plan.strategy == "parameter_server" else options.seed
    if options.record_example_ids and seed is None:
        raise UserError("--record_example_ids needs --seed and a synchronous strategy "
                        "(only a seeded order is addressed by example)")

    def train_dataset(context, start_step):
        return build_dataset(
            options.dataset, "train", plat.data_dir,
            batch_size=context.get_per_replica_batch_size(numbers.global_batch),
            image_size=shape[0], dtype=options.dtype, input_context=context, seed=seed,
            start_example=start_step * numbers.global_batch,
            global_batch=numbers.global_batch, with_ids=options.record_example_ids,
            label_offset=options.label_offset, data_threads=options.data_threads,
            skip_corrupt=options.skip_corrupt, cache_dir=plat.work_dir)

    return train_dataset


def _evaluation(options: TrainOptions, plat, numbers: Resolved, shape, model, num_classes):
    def evaluate():
        dataset = build_dataset(
            options.dataset, "validation", plat.data_dir, batch_size=numbers.per_replica_batch,
            image_size=shape[0], dtype=options.dtype, label_offset=options.label_offset,
            data_threads=options.data_threads, skip_corrupt=options.skip_corrupt,
            cache_dir=plat.work_dir)
        with checked(options.dataset, plat.data_dir, "validation", cache_dir=plat.work_dir):
            return evaluate_model(model, dataset, num_classes)

    return evaluate


def resume_settings(options: TrainOptions, plan, cluster, run: Prepared) -> dict | None:
    """The settings that decide the bits of a step, recorded with every checkpoint so that a
    resume with other values warns; None for parameter-server runs, never bit-identical."""
    from tfyard.train.checkpoint import machine_settings

    if plan.strategy == "parameter_server":
        return None
    numbers = run.numbers
    settings = {
        "seed": options.seed, "strategy": plan.strategy, "replicas": run.replicas,
        "members": max(cluster.num_workers, 1), "dtype": options.dtype,
        "jit_compile": run.trainer.config.jit_compile, "global_batch": numbers.global_batch,
        "data_threads": options.data_threads, **machine_settings()}
    if numbers.lr_schedule == "cosine":  # the only schedule that depends on the run's length
        settings["total_steps"] = numbers.total_steps
    if run.trainer.executor.needs_statistics_sync(run.model):
        # replicas average their batch-norm statistics at every boundary
        everies = {numbers.steps_per_epoch, options.checkpoint_every_steps, run.eval_every_steps}
        settings["sync_every"] = ",".join(str(n) for n in sorted(everies - {None}))
    return settings


def use_xla(options: TrainOptions, plan, model) -> bool:
    """--jit_compile as given; by default on wherever it is safe, as Keras `fit` does."""
    if options.jit_compile is not None:
        return options.jit_compile
    # Remote (PS) variables and cross-replica batch norm cannot live inside an XLA cluster.
    if plan.strategy == "parameter_server" or options.sync_batch_norm:
        return False
    return all(layer.supports_jit for layer in model._flatten_layers())


def synchronize_batch_norm(model) -> None:
    """Make every batch-norm layer compute its statistics over all replicas."""
    layers = [layer for layer in model._flatten_layers()
              if isinstance(layer, keras.layers.BatchNormalization)]
    if not layers:
        raise UserError(f"--sync_batch_norm: {model.name} has no batch-norm layers; drop the flag")
    for layer in layers:
        layer.synchronized = True
