"""The Trainer (inner loop) in-process on a toy model: no files, real TensorFlow steps."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.train.toy import BATCH, dataset_fn, toy_model, toy_trainer
from tfyard.train.task.objectives import Classification


def test_train_runs_n_steps_and_returns_the_metrics():
    trainer = toy_trainer()
    first = trainer.train(4)
    assert int(trainer.step.numpy()) == 4
    assert set(first) == {"loss", "top1", "top5", "lr", "images_per_sec", "step_time",
                          "input_wait"}
    assert 0.0 <= first["input_wait"] <= 1.0
    assert first["top5"] == 1.0 and first["lr"] == pytest.approx(0.1)
    for _ in range(10):
        last = trainer.train(4)
    assert int(trainer.step.numpy()) == 44
    assert last["loss"] < first["loss"] and last["top1"] > 0.8


def test_chunks_are_one_call_per_steps_per_loop_under_sync_strategies():
    trainer = toy_trainer(steps_per_loop=3)
    assert trainer.chunk_steps(10) == 3 and trainer.chunk_steps(2) == 2


def _l2_in_the_loss_step(model, optimizer, weight_decay, x, y):
    """The update tfyard used to make: L2 of the kernels added to the loss."""
    kernels = [v for v in model.trainable_variables if "kernel" in v.path]
    with tf.GradientTape() as tape:
        per_example, _ = Classification(2)(y, model(x, training=True))
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=BATCH)
        l2 = tf.add_n([tf.nn.l2_loss(v) for v in kernels])
        loss += tf.nn.scale_regularization_loss(weight_decay * l2)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_fused_weight_decay_equals_l2_in_the_loss(jit_compile):
    decay = 0.05
    trainer = toy_trainer(weight_decay=decay, jit_compile=jit_compile)
    trainer.train(6)
    reference = toy_model()
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(reference.trainable_variables)
    batches = iter(dataset_fn(tf.distribute.InputContext(), 0))
    for _ in range(6):
        _l2_in_the_loss_step(reference, optimizer, decay, *next(batches))
    undecayed = toy_trainer(weight_decay=0.0)
    undecayed.train(6)
    for ours, theirs in zip(trainer.model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    kernel = trainer.model.get_weights()[0]
    assert not np.allclose(kernel, undecayed.model.get_weights()[0], atol=1e-4)


def test_a_constant_learning_rate_reads_under_a_mirrored_strategy():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = toy_model()
        optimizer = keras.optimizers.SGD(0.05)
        optimizer.build(model.trainable_variables)
    from tfyard.train.loop import StepConfig, Trainer

    trainer = Trainer(strategy, model, optimizer, StepConfig(
        objective=Classification(2), global_batch=BATCH, jit_compile=True), dataset_fn)
    assert trainer.train(2)["lr"] == pytest.approx(0.05)


def test_a_trainers_iterator_is_deleted_off_the_thread_that_drops_the_trainer():
    """A collected trainer's tf.data iterator goes to `tfyard.data.release`: deleting one that
    lived a minute or more can take TensorFlow up to a minute, which no caller should wait."""
    trainer = toy_trainer()
    trainer.train(2)
    deleted = []
    weakref.finalize(trainer._input[0], lambda: deleted.append(
        threading.current_thread().name))
    trainer.model.trainer = trainer   # a cycle: the garbage collector deletes the trainer
    del trainer
    gc.collect()
    deadline = time.monotonic() + 10
    while not deleted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert deleted == ["tfyard-release"]
