"""A tiny custom-loop job that trains under whatever strategy tfyard picks from TF_CONFIG.

usage: tiny_train.py OUT_DIR STEPS. Writes OUT_DIR/<role>-<index>.json with the final
weights and losses, so tests can compare members.
"""

import json
import os
import sys

from tfyard.distribute import strategy as strategies
from tfyard.distribute.cluster import load_cluster_config


def main(out_dir: str, steps: int) -> None:
    cluster = load_cluster_config()
    plan = strategies.choose(cluster, 0)
    if plan.behaviour == "serve":
        strategies.serve(cluster, startup_timeout=120)
        return
    import keras
    import numpy as np
    import tensorflow as tf

    strategy = strategies.create_strategy(plan, cluster, 0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32")
    global_batch = 32

    def dataset_fn(ctx):
        batch = ctx.get_per_replica_batch_size(global_batch)
        data = tf.data.Dataset.from_tensor_slices((x, y)).shard(
            ctx.num_input_pipelines, ctx.input_pipeline_id)
        return data.repeat().batch(batch, drop_remainder=True)

    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(2)])
        optimizer = keras.optimizers.SGD(0.1)

    def replica_step(batch):
        images, labels = batch
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(labels, logits,
                                                                       from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    losses = []
    if plan.strategy == "parameter_server":
        coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        iterator = iter(coordinator.create_per_worker_dataset(
            lambda: dataset_fn(tf.distribute.InputContext())))

        @tf.function
        def step(it):
            loss = strategy.run(replica_step, args=(next(it),))
            return strategy.reduce("SUM", loss, axis=None)

        results = [coordinator.schedule(step, args=(iterator,)) for _ in range(steps)]
        coordinator.join()
        losses = [float(r.fetch()) for r in results]
    else:
        iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

        @tf.function
        def step(it):
            loss = strategy.run(replica_step, args=(next(it),))
            return strategy.reduce("SUM", loss, axis=None)

        losses = [float(step(iterator)) for _ in range(steps)]
    weights = [w.tolist() for w in model.get_weights()]
    name = f"{cluster.role}-{cluster.task_index}.json"
    with open(os.path.join(out_dir, name), "w") as handle:
        json.dump({"strategy": plan.strategy, "losses": losses, "weights": weights}, handle)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
