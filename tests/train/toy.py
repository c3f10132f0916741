"""A toy classifier and dataset for in-process Trainer and Controller tests."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfyard.train.loop import StepConfig, Trainer
from tfyard.train.task.objectives import Classification

BATCH = 8


def dataset_fn(context, seed_offset):
    """Two linearly separable classes of 4 features; the same order every time."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int32")
    batch = context.get_per_replica_batch_size(BATCH)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch, drop_remainder=True)


def toy_model(seed: int = 0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(2)])


def toy_trainer(weight_decay: float = 0.0, steps_per_loop: int = 2, momentum: float = 0.9,
                jit_compile: bool = False, skip_nonfinite: bool = False, strategy=None,
                data=dataset_fn, loss_scale: bool = False) -> Trainer:
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        model = toy_model()
        optimizer = keras.optimizers.SGD(0.1, momentum=momentum)
        if loss_scale:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
    config = StepConfig(objective=Classification(2), global_batch=BATCH,
                        weight_decay=weight_decay,
                        jit_compile=jit_compile, steps_per_loop=steps_per_loop,
                        skip_nonfinite=skip_nonfinite)
    return Trainer(strategy, model, optimizer, config, data)
