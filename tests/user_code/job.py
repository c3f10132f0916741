"""A user's training script, the successor of `model_to_estimator` + `TF_CONFIG`: a compiled
Keras model and an input function handed to `tfyard.fit`, which takes this process's role
from TF_CONFIG. It runs as `python job.py OUTPUT_DIR [CPU_REPLICAS]` and writes its summary
to OUTPUT_DIR/../<role>-<index>.json (no file on a parameter-server cluster's servers)."""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

import tfyard


def build(input_shape, num_classes):
    model = keras.Sequential([keras.Input(input_shape), keras.layers.Conv2D(4, 3),
                              keras.layers.BatchNormalization(), keras.layers.ReLU(),
                              keras.layers.Flatten(), keras.layers.Dense(num_classes)])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def input_fn(context):
    """Class 1 where the top half is brighter; each input pipeline reads its own shard."""
    x = np.random.default_rng(7).normal(size=(256, 8, 8, 1)).astype("float32")
    y = (x[:, :4].mean(axis=(1, 2, 3)) > x[:, 4:].mean(axis=(1, 2, 3))).astype("int64")
    data = tf.data.Dataset.from_tensor_slices((x, y))
    data = data.shard(context.num_input_pipelines, context.input_pipeline_id)
    return data.batch(context.get_per_replica_batch_size(32), drop_remainder=True)


if __name__ == "__main__":
    output_dir = sys.argv[1]
    replicas = dict(cpu_replicas=int(sys.argv[2]), ds="mirrored") if len(sys.argv) > 2 else {}
    summary = tfyard.fit(build, input_fn, eval_data=input_fn, num_classes=2, epochs=2,
                         output_dir=output_dir, seed=3, num_gpus="0", quiet=True, export=False,
                         **replicas)
    if summary is not None:
        task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
        member = f"{task.get('type', 'single')}-{task.get('index', 0)}"
        with open(os.path.join(os.path.dirname(output_dir), f"{member}.json"), "w") as out:
            json.dump(summary, out)
