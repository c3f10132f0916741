"""A small real training program for launcher tests, using tfyard's own strategy choice.

All-reduce members train a tiny Keras model in a custom loop and checkpoint every few
steps (the coordinator into OUT/checkpoints, the others into private dirs, as
MultiWorkerMirrored requires); they resume from the latest checkpoint. Under ps the
chief drives a ClusterCoordinator; ps and workers serve. The evaluator evaluates each
newest checkpoint, the final one included (however late it starts), and stops once the
coordinator has written OUT/summary.json (final_step, resumed_from_step, num_replicas).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

from tfyard.distribute import strategy as strategies
from tfyard.distribute.cluster import load_cluster_config

parser = argparse.ArgumentParser()
parser.add_argument("--output_dir", required=True)
parser.add_argument("--train_steps", type=int, default=20)
parser.add_argument("--checkpoint_every", type=int, default=5)
parser.add_argument("--step_delay", type=float, default=0.0)
parser.add_argument("--pid_dir")
args = parser.parse_args()

cluster = load_cluster_config()
me = f"{cluster.role}:{cluster.task_index}"
if args.pid_dir:
    with open(os.path.join(args.pid_dir, f"{me}.pids"), "w") as handle:
        handle.write(f"{os.getpid()}\n")
plan = strategies.choose(cluster, num_gpus=0)
print(f"{me}: {plan.behaviour} with {plan.strategy}", flush=True)
if plan.behaviour == "serve":
    strategies.serve(cluster, startup_timeout=float(os.environ.get("TFYARD_STARTUP_TIMEOUT", 60)))
    sys.exit(0)

summary_path = os.path.join(args.output_dir, "summary.json")
chief_dir = os.path.join(args.output_dir, "checkpoints")


def make_model():
    return tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)])


def dataset(batch):
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int64")
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch)


loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

if plan.behaviour == "evaluate":
    model = make_model()
    evaluated = set()
    x, y = next(iter(dataset(64)))
    while True:
        finished = os.path.exists(summary_path)  # read first: the last checkpoint is in
        latest = tf.train.latest_checkpoint(chief_dir)
        if latest and latest not in evaluated:
            tf.train.Checkpoint(model=model).restore(latest).expect_partial()
            loss = float(tf.reduce_mean(loss_fn(y, model(x))))
            evaluated.add(latest)
            with open(os.path.join(args.output_dir, "eval.json"), "w") as handle:
                json.dump({"checkpoint": latest, "loss": loss}, handle)
            print(f"evaluated {latest}: loss {loss:.4f}", flush=True)
        if finished:
            break
        time.sleep(0.2)
    sys.exit(0)

strategy = strategies.create_strategy(plan, cluster, num_gpus=0)
with strategy.scope():
    model = make_model()
    optimizer = tf.keras.optimizers.SGD(0.1)
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
writes_shared = cluster.is_coordinator
directory = chief_dir if writes_shared else os.path.join(args.output_dir, f"private-{me}")
manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=2)
latest = tf.train.latest_checkpoint(chief_dir)
if latest:
    checkpoint.restore(latest)
resumed_from = int(step.numpy())
print(f"{me}: starting at step {resumed_from}", flush=True)


def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)), global_batch_size=8)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                  model.trainable_variables, strict=True))
    step.assign_add(1)
    return loss


if plan.strategy == "parameter_server":
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    per_worker = coordinator.create_per_worker_dataset(lambda: dataset(8))
    iterator = iter(per_worker)

    @tf.function
    def remote_step(it):
        x, y = next(it)
        return strategy.run(train_step, args=(x, y))

    while int(step.numpy()) < args.train_steps:
        for _ in range(args.checkpoint_every):
            coordinator.schedule(remote_step, args=(iterator,))
        coordinator.join()
        manager.save()
    final = int(step.numpy())
else:
    iterator = iter(strategy.experimental_distribute_dataset(dataset(8)))

    @tf.function
    def distributed_step(it):
        x, y = next(it)
        return strategy.reduce("SUM", strategy.run(train_step, args=(x, y)), axis=None)

    while int(step.numpy()) < args.train_steps:
        loss = distributed_step(iterator)
        time.sleep(args.step_delay)
        if int(step.numpy()) % args.checkpoint_every == 0:
            manager.save(checkpoint_number=int(step.numpy()))
            print(f"{me}: step {int(step.numpy())} loss {float(loss):.4f} saved", flush=True)
    final = int(step.numpy())

if writes_shared:
    with open(summary_path + ".tmp", "w") as handle:
        json.dump({"final_step": final, "resumed_from_step": resumed_from,
                   "num_replicas": strategy.num_replicas_in_sync}, handle)
    os.replace(summary_path + ".tmp", summary_path)
print(f"{me}: done at step {final}", flush=True)
