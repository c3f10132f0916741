"""A small real training program for launcher tests, using tfyard's own strategy choice.

Members train a tiny Keras model with tfyard's Trainer under a Controller that
checkpoints every few steps (the coordinator into OUT/checkpoints, the others into
private dirs, as MultiWorkerMirrored requires); they resume from the latest checkpoint.
Under ps the chief drives the ClusterCoordinator; ps and workers serve. The evaluator evaluates each
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

from tfyard.distribute import server
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
    sys.exit(server.serve(
        cluster, startup_timeout=float(os.environ.get("TFYARD_STARTUP_TIMEOUT", 60))))

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

from tfyard.train.actions import CheckpointAction  # noqa: E402
from tfyard.train.controller import Callback, Controller  # noqa: E402
from tfyard.train.loop import StepConfig, Trainer  # noqa: E402
from tfyard.train.rundir.checkpoint import Checkpoints  # noqa: E402
from tfyard.train.task.objectives import Classification  # noqa: E402

strategy = strategies.create_strategy(plan, cluster, num_gpus=0)
with strategy.scope():
    model = make_model()
    optimizer = tf.keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
trainer = Trainer(strategy, model, optimizer,
                  StepConfig(objective=Classification(3), global_batch=8, steps_per_loop=1),
                  lambda context, offset: dataset(context.get_per_replica_batch_size(8)))
writes_shared = cluster.is_coordinator
checkpoints = Checkpoints(chief_dir, writes_shared, 2, model=model, optimizer=optimizer,
                          step=trainer.step)
checkpoints.restore_latest()
resumed_from = int(trainer.step.numpy())
print(f"{me}: starting at step {resumed_from}", flush=True)


def saved(state):
    print(f"{me}: step {state.step} loss {state.metrics['loss']:.4f} saved", flush=True)


final = Controller(trainer, args.train_steps, args.checkpoint_every, [
    CheckpointAction(checkpoints),
    Callback(on_chunk_end=lambda state: time.sleep(args.step_delay), on_boundary=saved),
]).run().step

if writes_shared:
    with open(summary_path + ".tmp", "w") as handle:
        json.dump({"final_step": final, "resumed_from_step": resumed_from,
                   "num_replicas": strategy.num_replicas_in_sync}, handle)
    os.replace(summary_path + ".tmp", summary_path)
print(f"{me}: done at step {final}", flush=True)
