"""Everything a training process builds before its first step: strategy, batch arithmetic,
model, optimizer, input and evaluation functions, and the `Trainer`. No files are written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import keras
import tensorflow as tf

from tfyard import compat, dtypes
from tfyard.distribute import coordination, devices
from tfyard.distribute import strategy as strategies
from tfyard.distribute.cluster import ClusterConfig
from tfyard.distribute.strategy import Plan
from tfyard.errors import UserError
from tfyard.models.factory import policy_name
from tfyard.platform import MAX_STEPS, Platform
from tfyard.train.fused import fuse_batch_norm
from tfyard.train.host_memory import keep_freed_memory
from tfyard.train.loop import StepConfig, Trainer
from tfyard.train.loop.evaluation import model_evaluation
from tfyard.train.optim import make_optimizer
from tfyard.train.options import TrainOptions
from tfyard.train.rundir.checkpoint import machine_settings
from tfyard.train.rundir.directory import read_run
from tfyard.train.task.recipes import RECIPES, Resolved
from tfyard.train.task.task import Task
from tfyard.train.weights.pretrained import start_from_weights

log = logging.getLogger("tfyard")


@dataclass(frozen=True)
class RunContext:
    """Who this process is and what it was asked to do."""

    options: TrainOptions
    plat: Platform
    cluster: ClusterConfig
    plan: Plan
    dtype_reason: str = dtypes.ASKED   # why options.dtype (`settle_dtype`)


@dataclass
class Prepared:
    """One process's training set-up; `evaluate` runs on the evaluation input."""

    context: RunContext
    strategy: tf.distribute.Strategy
    task: Task
    numbers: Resolved
    replicas: int
    policy: str | None
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    trainer: Trainer
    evaluate: Callable[[], dict] | None
    eval_every_steps: int | None
    init: dict | None = None   # where the weights started (train.pretrained), for run.json

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.task.input_shape


def dtype_policy(dtype: str) -> str | None:
    return None if dtype == "float32" else policy_name(dtype)


DTYPE_KEY = "tfyard_dtype"   # the chief's `--dtype auto` answer, for all-reduce members


def settle_dtype(context: RunContext, timeout: float) -> RunContext:
    """The context with `--dtype auto` replaced by the dtype the run computes in, and why:
    the one run.json recorded when the run resumes (its checkpoints hold it), else what this
    machine computes natively (`tfyard.dtypes`). All-reduce members take the chief's answer
    through the coordination service and refuse in one line when their own hardware answers
    otherwise. Call once the strategy has formed the cluster."""
    options, cluster = context.options, context.cluster
    if options.dtype != dtypes.AUTO:
        return context
    own = machine_dtype(context.plat.num_gpus)
    before = (read_run(context.plat.output_dir) or {}).get("dtype")
    choice = dtypes.recorded(before) if before in dtypes.DTYPES else own
    if context.plan.strategy == "multi_worker_mirrored":
        word = json.loads(coordination.chiefs_word(
            cluster, DTYPE_KEY, json.dumps([choice.dtype, choice.reason, own.dtype,
                                            own.reason]), timeout, "its --dtype auto"))
        choice, chiefs_own = dtypes.Choice(*word[:2]), dtypes.Choice(*word[2:])
        refusal = dtypes.disagreement(chiefs_own, own, f"{cluster.role} {cluster.task_index}")
        if refusal:
            raise UserError(refusal)
    return replace(context, options=options.with_updates(dtype=choice.dtype),
                   dtype_reason=choice.reason)


def machine_dtype(num_gpus: int) -> dtypes.Choice:
    """What `--dtype auto` means on this process's first `num_gpus` GPUs, else its CPU."""
    return dtypes.for_this_machine(devices.gpu_cards(num_gpus), compat.onednn_enabled())


def input_pipelines(plan, cluster) -> int:
    """How many input pipelines feed a step: one per all-reduce member, else one."""
    return max(cluster.num_workers, 1) if plan.strategy == "multi_worker_mirrored" else 1


def start_strategy(context: RunContext) -> tf.distribute.Strategy:
    """The process's strategy, made before anything starts TensorFlow's runtime (a user's
    input function probed by `make_task` would): collectives and logical CPU devices can
    only be configured before it starts."""
    options = context.options
    keep_freed_memory()   # each step reuses the last one's buffers (train.host_memory)
    strategies.configure_cpu_replicas(options.cpu_replicas)
    return strategies.create_strategy(context.plan, context.cluster, context.plat.num_gpus)


def prepare(context: RunContext, task: Task, strategy: tf.distribute.Strategy,
            max_steps: int | None = None) -> Prepared:
    """Batch arithmetic, model, optimizer and the Trainer for one process, under the
    strategy of `start_strategy`."""
    options, cluster, plan = context.options, context.cluster, context.plan
    replicas = strategy.num_replicas_in_sync if plan.strategy != "parameter_server" \
        else cluster.num_workers
    numbers = capped(_numbers(options, task, replicas, input_pipelines(plan, cluster)),
                     max_steps)
    policy = dtype_policy(options.dtype)
    if options.seed is not None:
        # just before the weights are drawn: Keras draws an initializer's seed from Python's
        # global random, which whatever ran since the start may have used (a GCS upload's
        # multipart boundary does), so seeding earlier would not fix the weights
        keras.utils.set_random_seed(options.seed)
    with strategy.scope():
        model = task.build_model(policy)
        if options.sync_batch_norm:
            synchronize_batch_norm(model)
        fuse_batch_norm(model)   # the same numbers, one op per batch norm (train.fused)
        # trained weights and frozen layers, before the optimizer sees what trains
        init = start_from_weights(model, options, task.input_shape, context.plat.output_dir,
                                  cluster.is_coordinator)
        optimizer = task.compiled_optimizer(model)
        if optimizer is None:
            optimizer = make_optimizer(numbers, options.momentum, options.nesterov,
                                       options.dtype, model)
        else:
            ignored = options.recipe_changes()
            if ignored and cluster.is_coordinator:
                log.warning(f"tfyard: warning: the model is compiled, so it trains with its "
                            f"own optimizer and loss; ignored: --{', --'.join(ignored)}")
            optimizer = _loss_scaled(optimizer, options.dtype)
            numbers = replace(numbers, optimizer=type(optimizer).__name__, weight_decay=0.0,
                              learning_rate=float(tf.convert_to_tensor(optimizer.learning_rate)),
                              lr_schedule="compiled")
        optimizer.build(model.trainable_variables)
    objective = task.objective(model, options.label_smoothing)
    config = StepConfig(
        objective=objective, global_batch=numbers.global_batch,
        weight_decay=numbers.weight_decay if numbers.optimizer == "sgd" else 0.0,
        jit_compile=use_xla(options, plan, model, context.plat.num_gpus),
        steps_per_loop=options.steps_per_loop,
        skip_nonfinite=options.skip_nonfinite_steps > 0)
    seed = None if plan.strategy == "parameter_server" or not task.data.seeded else options.seed
    if options.record_example_ids and seed is None:
        raise UserError("--record_example_ids needs --seed, a registry dataset and a "
                        "synchronous strategy (only a seeded order is addressed by example)")
    trainer = Trainer(strategy, model, optimizer, config,
                      lambda context, start: task.data.train(context, start,
                                                             numbers.global_batch, seed),
                      record_ids=options.record_example_ids)
    eval_steps = _eval_steps(options, numbers.steps_per_epoch)
    evaluate = _evaluation(task, numbers, model, objective, strategy) \
        if task.data.has_eval else None
    return Prepared(context, strategy, task, numbers, replicas, policy, model, optimizer, trainer,
                    evaluate, max(1, eval_steps) if eval_steps is not None else None, init)


def _eval_steps(options: TrainOptions, steps_per_epoch: int) -> int | None:
    """Steps between evaluations: --eval_every_steps, or --eval_every_epochs in steps;
    None: at the end only."""
    if options.eval_every_steps and options.eval_every_epochs:
        raise UserError("give --eval_every_steps or --eval_every_epochs, not both")
    if options.eval_every_epochs:
        return round(options.eval_every_epochs * steps_per_epoch)
    return options.eval_every_steps


def _numbers(options: TrainOptions, task: Task, replicas: int, pipelines: int) -> Resolved:
    """The run's numbers. With --seed, a registry dataset's stream is addressed by global
    example number (`tfyard.data.order`) and starts at start_step x global batch, so a
    resumed run reads exactly what an unbroken one would; a user's input skips the batches
    its steps consumed. Parameter-server workers keep an unseeded per-worker shuffle:
    TensorFlow 2.21 gives each of them the same InputContext(1, 0, R) and the same graph."""
    data = task.data
    if data.train_examples is not None:
        return resolve_numbers(options, task.family, replicas, data.train_examples)
    batch, steps = data.steps(replicas, pipelines)
    return resolve_numbers(options, task.family, replicas, None, input_batch=batch,
                           input_steps=steps)


def capped(numbers: Resolved, cap: int | None) -> Resolved:
    """`numbers` with at most `cap` steps (TFYARD_MAX_STEPS), said in one line where it
    cuts."""
    if cap is None or cap >= numbers.total_steps:
        return numbers
    log.info(f"tfyard: {MAX_STEPS}={cap}: training {cap} of the run's "
             f"{numbers.total_steps} steps")
    return replace(numbers, total_steps=cap)


def resolve_numbers(options: TrainOptions, family: str, replicas: int,
                    train_examples: int | None, *, input_batch: int | None = None,
                    input_steps: int | None = None) -> Resolved:
    """Apply the recipe, check the batch against the replicas, and count steps.

    A user's input function decides its own batch (`input_batch`, the global batch of its
    per-replica batches, None when their size varies) and its epoch (`input_steps`, None
    when it is endless: then the steps must be given; more steps than one epoch repeat the
    input, epoch after epoch, as registry datasets do)."""
    recipe = RECIPES[family]
    if train_examples is None:   # a user's input function
        global_batch = input_batch or options.batch_size or (
            options.per_replica_batch_size or 0) * replicas or None
        asked = options.batch_size or (options.per_replica_batch_size or 0) * replicas
        if input_batch and asked and asked != input_batch:
            raise UserError(f"the input's batches make a global batch of {input_batch} over "
                            f"{replicas} replica(s), not the {asked} asked; drop batch_size or "
                            "batch the input to match")
        if input_steps is None and options.train_steps is None:
            raise UserError("the input is endless (or its length is unknown), so it has no "
                            "epochs: give train_steps (--train_steps)")
        steps_per_epoch = input_steps or options.train_steps
        epochs = options.epochs or 1   # Keras fit's default
    else:
        if options.per_replica_batch_size is not None:
            if options.batch_size is not None:
                raise UserError("give --batch_size or --per_replica_batch_size, not both")
            global_batch = options.per_replica_batch_size * replicas
        else:
            global_batch = options.batch_size or recipe.batch_size
        if global_batch % replicas:
            raise UserError(
                f"--batch_size {global_batch} does not divide over {replicas} replicas; use a "
                f"multiple of {replicas} or --per_replica_batch_size"
            )
        steps_per_epoch = max(1, train_examples // global_batch)
        epochs = options.epochs or recipe.epochs
    if options.train_steps is not None:
        total = options.train_steps
    else:
        total = max(1, round(epochs * steps_per_epoch))
    lr = options.learning_rate or recipe.base_lr * (global_batch or recipe.base_batch) \
        / recipe.base_batch
    return Resolved(
        global_batch=global_batch,
        per_replica_batch=global_batch // replicas if global_batch else None,
        learning_rate=lr,
        optimizer=options.optimizer or recipe.optimizer,
        lr_schedule=options.lr_schedule or recipe.lr_schedule,
        decay_epochs=options.decay_epochs if options.decay_epochs is not None
        else recipe.decay_epochs,
        warmup_epochs=options.warmup_epochs if options.warmup_epochs is not None
        else recipe.warmup_epochs,
        weight_decay=options.weight_decay if options.weight_decay is not None
        else recipe.weight_decay,
        steps_per_epoch=steps_per_epoch,
        total_steps=total,
    )


def _loss_scaled(optimizer, dtype: str):
    if dtype == "float16" and not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def _evaluation(task: Task, numbers: Resolved, model, objective, strategy):
    """`evaluate()`: the objective's figures on the evaluation input, over the replicas."""
    batch = numbers.per_replica_batch or 64
    measure = model_evaluation(model, objective, strategy)

    def evaluate():
        with task.data.checked("validation"):
            return measure(lambda context: task.data.evaluation(context, batch))

    return evaluate


def use_xla(options: TrainOptions, plan, model, num_gpus: int) -> bool:
    """--jit_compile as given; by default on wherever it is safe and faster: on GPUs, and
    on a CPU only where TensorFlow's oneDNN kernels are off (on, they train ResNet-20 2.4x
    faster than XLA's on this project's CPU; off, XLA is 1.75x faster than the rest)."""
    if options.jit_compile is not None:
        return options.jit_compile
    # Remote (PS) variables and cross-replica batch norm cannot live inside an XLA cluster.
    if plan.strategy == "parameter_server" or options.sync_batch_norm:
        return False
    if not num_gpus and compat.onednn_enabled():
        return False
    return all(layer.supports_jit for layer in compat.all_layers(model))


def synchronize_batch_norm(model) -> None:
    """Make every batch-norm layer compute its statistics over all replicas."""
    layers = [layer for layer in compat.all_layers(model)
              if isinstance(layer, keras.layers.BatchNormalization)]
    if not layers:
        raise UserError(f"--sync_batch_norm: {model.name} has no batch-norm layers; drop the flag")
    for layer in layers:
        layer.synchronized = True


def resume_settings(prepared: Prepared) -> dict | None:
    """The settings that decide the bits of a step of a prepared run, recorded with every
    checkpoint so that a resume with other values warns; None for parameter-server runs,
    never bit-identical."""
    context = prepared.context
    options, cluster, plan = context.options, context.cluster, context.plan
    if plan.strategy == "parameter_server":
        return None
    numbers = prepared.numbers
    settings = {
        "seed": options.seed, "strategy": plan.strategy, "replicas": prepared.replicas,
        "members": max(cluster.num_workers, 1), "dtype": options.dtype,
        "jit_compile": prepared.trainer.config.jit_compile, "global_batch": numbers.global_batch,
        "data_threads": options.data_threads, **machine_settings()}
    if numbers.lr_schedule == "cosine":  # the only schedule that depends on the run's length
        settings["total_steps"] = numbers.total_steps
    if prepared.trainer.executor.needs_statistics_sync(prepared.model):
        # replicas average their batch-norm statistics at every boundary
        everies = {numbers.steps_per_epoch, options.checkpoint_every_steps,
                   prepared.eval_every_steps}
        settings["sync_every"] = ",".join(str(n) for n in sorted(everies - {None}))
    return settings
