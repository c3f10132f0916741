"""A tiny job on tfyard's own Trainer, under whatever strategy tfyard picks from TF_CONFIG.

usage: tiny_train.py OUT_DIR STEPS. Runs one step per chunk and writes
OUT_DIR/<role>-<index>.json with the final weights and each step's loss, so tests can
compare members.
"""

import json
import os
import sys

from tfyard.distribute import strategy as strategies
from tfyard.distribute.cluster import load_cluster_config

GLOBAL_BATCH = 32


def main(out_dir: str, steps: int) -> None:
    cluster = load_cluster_config()
    plan = strategies.choose(cluster, 0)
    if plan.behaviour == "serve":
        sys.exit(strategies.serve(cluster, startup_timeout=120))
    import keras
    import numpy as np
    import tensorflow as tf

    from tfyard.train.loop import StepConfig, Trainer

    strategy = strategies.create_strategy(plan, cluster, 0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32")

    def dataset_fn(ctx, seed_offset):
        batch = ctx.get_per_replica_batch_size(GLOBAL_BATCH)
        data = tf.data.Dataset.from_tensor_slices((x, y)).shard(
            ctx.num_input_pipelines, ctx.input_pipeline_id)
        return data.repeat().batch(batch, drop_remainder=True)

    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(2)])
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    trainer = Trainer(strategy, model, optimizer,
                      StepConfig(num_classes=2, global_batch=GLOBAL_BATCH, steps_per_loop=1),
                      dataset_fn)
    losses = [trainer.train(1)["loss"] for _ in range(steps)]
    weights = [w.tolist() for w in model.get_weights()]
    name = f"{cluster.role}-{cluster.task_index}.json"
    with open(os.path.join(out_dir, name), "w") as handle:
        json.dump({"strategy": plan.strategy, "losses": losses, "weights": weights}, handle)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
