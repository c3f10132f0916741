"""Guards in-process on the toy model: skipping non-finite steps, refusing non-finite saves,
falling back from unreadable checkpoints, tolerant run files."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import tensorflow as tf

from tests.train.toy import dataset_fn, toy_trainer
from tfyard.errors import UserError
from tfyard.train.actions import DivergenceGuard
from tfyard.train.controller import Controller
from tfyard.train.rundir.checkpoint import Checkpoints
from tfyard.train.rundir.directory import read_json_lines, refuse_other_run
from tfyard.train.rundir.report import Reporter


def poisoned(at_batch: int):
    """The toy data with NaN features in batch `at_batch` (0-based) and only there."""
    def make(context, seed_offset):
        batches = dataset_fn(context, seed_offset).take(8)
        x, y = next(iter(batches.unbatch().batch(64)))
        x = x.numpy()
        x[at_batch * 8:(at_batch + 1) * 8] = np.nan
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=True).repeat()
    return make


@pytest.mark.parametrize("jit_compile,mirrored", [(False, False), (True, False), (True, True)])
def test_skipping_is_bit_for_bit_neutral_while_everything_is_finite(jit_compile, mirrored):
    def strategy():
        return tf.distribute.MirroredStrategy(["/cpu:0"]) if mirrored else None

    plain = toy_trainer(jit_compile=jit_compile, strategy=strategy())
    skipping = toy_trainer(jit_compile=jit_compile, skip_nonfinite=True, strategy=strategy())
    plain.train(6)
    metrics = skipping.train(6)
    assert (metrics["skipped_steps"], metrics["skipped_in_a_row"]) == (0, 0)
    for ours, theirs in zip(plain.model.get_weights(), skipping.model.get_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_a_non_finite_step_is_skipped_under_one_device_mirrored_and_loss_scaling():
    for strategy, loss_scale in ((None, False), (tf.distribute.MirroredStrategy(["/cpu:0"]),
                                                 False), (None, True)):
        trainer = toy_trainer(steps_per_loop=4, skip_nonfinite=True, data=poisoned(2),
                              strategy=strategy, loss_scale=loss_scale)
        trainer.train(2)
        before = [w.copy() for w in trainer.model.get_weights()]
        metrics = trainer.train(1)   # the poisoned batch: no update at all
        assert metrics["skipped_steps"] == 1 and metrics["skipped_in_a_row"] == 1
        for ours, theirs in zip(before, trainer.model.get_weights(), strict=True):
            np.testing.assert_array_equal(ours, theirs)
        metrics = trainer.train(4)
        assert np.isfinite(metrics["loss"]) and metrics["skipped_steps"] == 0
        assert all(np.isfinite(w).all() for w in trainer.model.get_weights())


def test_without_skipping_a_nan_loss_stops_the_run_naming_its_step(tmp_path):
    trainer = toy_trainer(steps_per_loop=4, data=poisoned(5))
    checkpoints = Checkpoints(str(tmp_path), True, 1, model=trainer.model, step=trainer.step)
    checkpoints.save(0)
    # NaN inputs: a NaN loss, or (where ReLU's kernel maps NaN to 0) NaN gradients only
    with pytest.raises(UserError, match=r"diverged at step 6: (loss nan|non-finite gradients "
                                        r"\(loss [0-9.]+\)); lower --learning_rate "
                                        r"\(last finite checkpoint: .*ckpt-0 kept\)"):
        Controller(trainer, 12, 12, [DivergenceGuard(checkpoints)]).run()
    assert int(trainer.step.numpy()) == 8


def test_a_non_finite_state_is_never_saved_and_the_finite_one_survives_rotation(tmp_path):
    trainer = toy_trainer()
    checkpoints = Checkpoints(str(tmp_path), True, 1, model=trainer.model,
                              optimizer=trainer.optimizer, step=trainer.step)
    trainer.train(2)
    good = checkpoints.save(2)
    with pytest.raises(UserError, match="by step 4: loss nan, so it was not saved"):
        checkpoints.save(4, float("nan"))
    trainer.model.weights[0].assign(tf.fill(trainer.model.weights[0].shape, np.inf))
    with pytest.raises(UserError, match=f"a weight is not finite.*{good} kept"):
        checkpoints.save(4)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]


def _two_checkpoints(tmp_path):
    trainer = toy_trainer()
    checkpoints = Checkpoints(str(tmp_path), True, 3, model=trainer.model,
                              optimizer=trainer.optimizer, step=trainer.step)
    trainer.train(2)
    checkpoints.save(2)
    saved = [v.numpy().copy() for v in checkpoints._variables]
    trainer.train(2)
    checkpoints.save(4)
    return saved


def _restore(tmp_path):
    trainer = toy_trainer()
    trainer.train(6)   # different values everywhere: a restore must overwrite all of them
    checkpoints = Checkpoints(str(tmp_path), True, 3, model=trainer.model,
                              optimizer=trainer.optimizer, step=trainer.step)
    return checkpoints.restore_latest(), checkpoints, int(trainer.step.numpy())


@pytest.mark.parametrize("damage", ["truncated data", "missing index", "garbage index"])
def test_an_unreadable_latest_checkpoint_falls_back_to_the_one_before(tmp_path, damage, caplog):
    saved = _two_checkpoints(tmp_path)
    data, index = tmp_path / "ckpt-4.data-00000-of-00001", tmp_path / "ckpt-4.index"
    if damage == "truncated data":
        data.write_bytes(data.read_bytes()[:len(data.read_bytes()) // 2])
    elif damage == "missing index":
        index.unlink()
    else:
        index.write_bytes(b"\x00garbage" * 50)
    with caplog.at_level(logging.WARNING, logger="tfyard"):
        path, checkpoints, step = _restore(tmp_path)
    assert path.endswith("ckpt-2") and step == 2
    warnings = [r.getMessage() for r in caplog.records   # tfyard's own (not TensorFlow's
                if r.levelno == logging.WARNING and r.name == "tfyard"]   # retracing notes)
    assert len(warnings) == 1 and "ckpt-4 is unreadable" in warnings[0]
    for ours, theirs in zip(saved, checkpoints._variables, strict=True):
        np.testing.assert_array_equal(ours, theirs.numpy())


def test_no_readable_checkpoint_is_one_error_and_nothing_is_deleted(tmp_path):
    _two_checkpoints(tmp_path)
    for data in tmp_path.glob("*.data-*"):
        data.write_bytes(b"")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(UserError, match="none of the 2 checkpoint"):
        _restore(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_torn_lines_are_skipped_with_one_warning_and_the_next_record_starts_fresh(
        tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"kind": "train", "step": 1, "loss": 1.0}\n{"kind": "train", "st')
    with caplog.at_level(logging.WARNING, logger="tfyard"):
        assert [r["step"] for r in read_json_lines(str(path))] == [1]
    assert ["skipped 1 torn line(s) (line 2)" in r.getMessage() for r in caplog.records] == [True]
    reporter = Reporter(str(tmp_path), str(tmp_path / "logs"))
    reporter.report(2, 0.1, {"loss": 0.5})
    reporter.close()
    assert [r["step"] for r in read_json_lines(str(path))] == [1, 2]
    assert json.loads(path.read_text().splitlines()[-1])["step"] == 2


def test_a_rerun_of_another_model_dataset_or_class_count_is_refused(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(
        {"model": "resnet50", "dataset": "imagenet", "num_classes": 1000}, indent=2))
    refuse_other_run(str(tmp_path), "resnet50", "imagenet", 1000)
    with pytest.raises(UserError, match=r"holds a run of resnet50 on imagenet \(1000 classes\); "
                                        r"this run is cifar_resnet20 on digits \(10 classes\)"):
        refuse_other_run(str(tmp_path), "cifar_resnet20", "digits", 10)
    with pytest.raises(UserError, match="this run is resnet50 on imagenet \\(10 classes"):
        refuse_other_run(str(tmp_path), "resnet50", "imagenet", 10)
