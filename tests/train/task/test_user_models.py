"""The user's own Keras model and input (issue 21): `--model MODULE:FUNCTION` and `tfyard.fit`.

The models live in tests/user_code/models.py, written as a user writes them; none comes from
tfyard's registry. The CLI runs in this process (`tfyard.cli.main`) wherever a fresh one is not
the point: two CPU replicas need a process whose TensorFlow has not started (one, shared by
every test of two replicas), and one refusal goes through the console script to show what a
user's terminal gets.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfyard
from tests.conftest import run_here, run_tfyard
from tests.train.conftest import USER_CODE, forget_user_modules, read_json, read_jsonl
from tfyard.errors import UserError

MODELS = USER_CODE / "models.py"
# Four training records (one a step): what the tests read; more steps would only cost CPU.
SMALL = ["--dataset", "digits", "--image_size", "32", "--batch_size", "32", "--num_gpus", "0",
         "--seed", "3", "--steps_per_loop", "1", "--train_steps", "4", "--quiet",
         "--no_jit_compile"]
# Each user model at the image size its cluster runs use: the regularized convnet with
# Dropout, a compiled one (its own Adam), and a Keras Applications MobileNetV3Small (batch
# norm, averaged across the workers at boundaries).
USER_MODELS = {"convnet": "16", "compiled": "16", "mobilenet": "32"}


def user_model(name: str) -> list[str]:
    """The `tfyard train` flags that train user model `name` at its size."""
    return ["--model", f"{MODELS}:{name}", "--image_size", USER_MODELS[name]]


def user_model_train(name: str, replicas: int, out, work) -> list[str]:
    """The `tfyard train` arguments of `test_a_user_model_trains_evaluates_and_exports`."""
    return [str(arg) for arg in (
        "train", "--model", f"{MODELS}:{name}", *SMALL, "--output_dir", out, "--work_dir",
        work, "--cpu_replicas", replicas, *(["--ds", "mirrored"] if replicas > 1 else []),
        "--label_smoothing", "0.1")]


# Each model once, on one device or two mirrored replicas: MobileNet's batch norm and the
# compiled model's own metrics across replicas; the convnet on one device. Every model also
# trains all-reduce (killed and resumed in tests/reliability/test_faults.py, MobileNet on
# Spark) and with parameter servers (tests/train/test_clusters.py); a compiled model on one
# device follows Keras' fit (below). Two replicas train in the fresh process of
# `two_replica_process` (this one's TensorFlow has started), by `tfyard.cli.main` there (its
# tests follow these, so that xdist's worksteal seldom splits them); one device, and every
# `tfyard evaluate`, run here.
@pytest.mark.parametrize("name, replicas", [("convnet", 1), ("mobilenet", 2), ("compiled", 2)])
def test_a_user_model_trains_evaluates_and_exports(tmp_path, digits_work, capfd, user_imports,
                                                   request, name, replicas):
    if replicas > 1:
        result, out = request.getfixturevalue("two_replica_process").trained[name]
    else:
        out = tmp_path / "out"
        result = run_here(capfd, *user_model_train(name, replicas, out, digits_work))
    assert result.returncode == 0, result.stderr[-3000:]
    # a compiled model trains with its own loss: the recipe's flags are named as ignored
    assert ("ignored: --label_smoothing" in result.stdout) == (name == "compiled")
    summary = read_json(out / "summary.json")
    assert summary["model"] == f"{MODELS}:{name}" and summary["replicas"] == replicas
    assert summary["strategy"] == ("one_device" if replicas == 1 else "mirrored")
    metric = "accuracy" if name == "compiled" else "top1"   # a compiled model's own metric
    assert set(summary["eval"]) == ({"loss", "accuracy"} if name == "compiled"
                                    else {"loss", "top1", "top5"})
    train = [r for r in read_jsonl(out / "metrics.jsonl") if r["kind"] == "train"]
    assert len(train) == 4 and all(np.isfinite(r["loss"]) and metric in r for r in train)
    if name == "compiled":
        assert summary["optimizer"] == "Adam"   # trained with the optimizer it was compiled with
    forget_user_modules()   # evaluate imports the module run.json names itself
    result = run_here(capfd, "evaluate", "--output_dir", out, "--export")
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["source"] == str(out / "export" / "model.keras"), \
        result.stdout
    served = tf.saved_model.load(str(out / "export" / "saved_model"))
    images = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    probabilities = served.serve(tf.constant(images))["probabilities"].numpy()
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-4)


# What the fixture's process prints before each CLI run, on stdout and stderr, and after it
MARK = "=== tfyard train of "


class TwoReplicaProcess(NamedTuple):
    work: Path
    printed: list[str]   # the notebook cells' lines
    trained: dict   # model name -> (CompletedProcess of its `tfyard train`, its output dir)


@pytest.fixture(scope="module")
def two_replica_process(tmp_path_factory, digits_work) -> TwoReplicaProcess:
    """One fresh process for the tests of two CPU replicas: tests/user_code/job.py runs
    first as that process's `__main__`, as `python job.py OUT 2` runs it, then a notebook's
    later cells call tfyard.fit twice more on 2 CPU replicas, once with another model (its
    collectives of other shapes), and once on 3; last, `tfyard train` of each user model that
    trains on two replicas, by `tfyard.cli.main` (a process pays its TensorFlow start once)."""
    work = tmp_path_factory.mktemp("two-replicas")
    job, out = str(USER_CODE / "job.py"), str(work / "out")
    runs = {name: user_model_train(name, 2, work / name, digits_work)
            for name in ("mobilenet", "compiled")}
    script = f"""
import runpy
import sys
sys.argv = [{job!r}, {out!r}, "2"]
runpy.run_path({job!r}, run_name="__main__")
sys.path.insert(0, {str(USER_CODE)!r})
import tfyard
from tfyard.errors import UserError
from job import build, input_fn
common = dict(num_classes=2, output_dir={str(work / "cells")!r}, ds="mirrored",
              num_gpus="0", quiet=True, export=False, jit_compile=False)
for steps in (2, 4):
    print("steps", tfyard.fit(build, input_fn, train_steps=steps, cpu_replicas=2, **common)[
        "final_step"])
import keras
def other(input_shape, num_classes):
    model = keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                              keras.layers.Dense(7), keras.layers.Dense(num_classes)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    return model
print("other", tfyard.fit(other, input_fn, train_steps=2, cpu_replicas=2,
                          **{{**common, "output_dir": {str(work / "other")!r}}})["final_step"])
try:
    tfyard.fit(build, input_fn, train_steps=6, cpu_replicas=3, **common)
except UserError as exc:
    print("refused", exc)
from tfyard.cli import main
for name, argv in {runs!r}.items():
    for stream in (sys.stdout, sys.stderr):
        print({MARK!r} + name, file=stream, flush=True)
    try:
        code = main(argv)
    except SystemExit as exited:
        code = exited.code
    print({MARK!r} + name, "exit", code, flush=True)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    printed, *sections = result.stdout.split(MARK)   # the cells', then each run's and its end
    trained = {name: (subprocess.CompletedProcess(
        argv, int(ended.split()[-1]), ran.removeprefix(name), err.removeprefix(name)), work / name)
        for (name, argv), ran, ended, err in zip(runs.items(), sections[::2], sections[1::2],
                                                 result.stderr.split(MARK)[1:], strict=True)}
    return TwoReplicaProcess(work, printed.splitlines(), trained)


def test_a_user_script_with_an_input_fn_trains_on_two_cpu_replicas(two_replica_process):
    """tests/user_code/job.py in a fresh process: the input function is probed only after
    the strategy set up its logical devices (TensorFlow allows it only before it starts),
    and with the InputContext training hands it: `get_per_replica_batch_size(32)` is 16."""
    summary = read_json(two_replica_process.work / "single-0.json")
    assert (summary["strategy"], summary["replicas"], summary["global_batch"]) == \
        ("mirrored", 2, 32)
    assert summary["final_step"] == 16   # 256 examples / 32 a step, 2 epochs


def test_cpu_replicas_are_set_once_per_process(two_replica_process):
    """tfyard.fit again in one process on 2 CPU replicas (a notebook's next cells, after the
    script's run) works, with another model too; a different count, once TensorFlow has
    started, is one line saying why."""
    printed = two_replica_process.printed
    assert printed == [
        "steps 2", "steps 4", "other 2",
        "refused --cpu_replicas 3: TensorFlow's runtime already started in this process (a "
        "TensorFlow op ran before training); call tfyard.fit before any TensorFlow op, or in "
        "a fresh process"], printed


def test_a_compiled_model_follows_the_loss_curve_of_keras_fit(tmp_path):
    """Same seeded batches, same initial weights: tfyard.fit and model.fit agree step by
    step within 1e-4 relative (both float32 on one CPU, XLA off on both sides; what differs
    is only how the two loops order the same float operations)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8, 8, 1)).astype("float32")
    y = rng.integers(0, 10, size=256).astype("int32")

    def input_fn(context):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(32, drop_remainder=True)

    def build(input_shape):
        keras.utils.set_random_seed(7)
        model = keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                                  keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.SGD(0.1), metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    summary = tfyard.fit(build, input_fn, output_dir=str(tmp_path / "out"), epochs=2,
                         steps_per_loop=1, jit_compile=False, num_gpus="0", quiet=True,
                         export=False)
    ours = [r["loss"] for r in read_jsonl(tmp_path / "out" / "metrics.jsonl")
            if r["kind"] == "train"]
    reference = build((8, 8, 1))
    losses = []
    reference.fit(input_fn(None).repeat(), epochs=16, steps_per_epoch=1, verbose=0,
                  shuffle=False, callbacks=[keras.callbacks.LambdaCallback(
                      on_epoch_end=lambda epoch, logs: losses.append(logs["loss"]))])
    assert summary["final_step"] == 16 and len(ours) == 16
    np.testing.assert_allclose(ours, losses, rtol=1e-4)
    assert ours[-1] < ours[0]


def test_a_kernel_regularizer_counts_in_the_loss(tmp_path):
    """The first step's reported loss is the data loss plus the regularizer's penalty."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("user_models", MODELS)
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(32, 16, 16, 3)).astype("float32")
    y = rng.integers(0, 10, size=32).astype("int32")

    def input_fn(context):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(32)

    first = {}
    for l2 in (0.0, 10.0):
        def build(num_classes, input_shape, l2=l2):
            keras.utils.set_random_seed(5)
            return models.convnet(num_classes, input_shape, l2=l2)

        out = tmp_path / f"l2-{l2}"
        tfyard.fit(build, input_fn, num_classes=10, output_dir=str(out), train_steps=1,
                   steps_per_loop=1, jit_compile=False, num_gpus="0", quiet=True, export=False)
        first[l2] = read_jsonl(out / "metrics.jsonl")[0]["loss"]
        kernel = build(10, (16, 16, 3)).layers[1].kernel
    penalty = 10.0 * float(tf.reduce_sum(tf.square(kernel)))
    assert first[10.0] - first[0.0] == pytest.approx(penalty, rel=1e-3)


@pytest.mark.parametrize("reference, expected", [
    (f"{USER_CODE / 'broken.py'}:build", "failed to import (RuntimeError: the user's module "
                                         "is broken)"),
    ("no_such_package.nets:build", "cannot import no_such_package.nets"),
    (f"{MODELS}:nowhere", "has no function nowhere; it defines"),
    (f"{MODELS}:not_a_model", "returned str, not a keras.Model"),
    (f"{MODELS}:three_outputs", "outputs 3 values per example but the data has 10 classes"),
    (f"{MODELS}:one_hot_loss", "its loss categorical_crossentropy does not fit the labels "
                               "(int32 [batch])"),
])
def test_bad_user_code_is_one_line_before_any_step(tmp_path, digits_work, capfd, user_imports,
                                                    reference, expected):
    """`tfyard train` here, by `tfyard.cli.main`; the last case, which goes furthest (model
    built, data read), runs the console script in a fresh process: exit status 2 and one
    line on a user's terminal, no TensorFlow log line."""
    argv = ["train", "--model", reference, *SMALL, "--output_dir", tmp_path / "out",
            "--work_dir", digits_work, "--image_size", "16"]
    result = run_tfyard(*argv) if reference.endswith(":one_hot_loss") else run_here(capfd, *argv)
    status, stderr = result.returncode, result.stderr
    assert status == 2, stderr[-2000:]
    assert "Traceback" not in stderr and expected in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


def _dense(input_shape):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                             keras.layers.Dense(10)])


def test_bad_user_input_is_refused_before_any_step(tmp_path):
    def single_tensors(context):
        return tf.data.Dataset.from_tensor_slices(np.zeros((8, 4, 4, 1), "float32")).batch(4)

    with pytest.raises(UserError, match="elements are single tensors"):
        tfyard.fit(_dense, single_tensors, num_classes=10, train_steps=5,
                   output_dir=str(tmp_path / "out"), num_gpus="0", quiet=True)
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


def test_a_dataset_itself_and_an_input_fn_without_context_are_inputs(tmp_path, capfd):
    images = np.random.default_rng(1).normal(size=(32, 4, 4, 1)).astype("float32")
    batches = tf.data.Dataset.from_tensor_slices((images, np.arange(32) % 10)).batch(8)
    summary = tfyard.fit(_dense, batches, eval_data=lambda: batches, num_classes=10,
                         output_dir=str(tmp_path / "out"), num_gpus="0", quiet=True,
                         export=False, jit_compile=False)
    assert summary["final_step"] == 4 and summary["eval"]["top1"] >= 0, summary
    refused = run_here(capfd, "evaluate", "--output_dir", tmp_path / "out")
    status, stderr = refused.returncode, refused.stderr
    assert status == 2 and "that `tfyard evaluate` cannot import" in stderr \
        and "Traceback" not in stderr, stderr   # not importable
    with pytest.raises(UserError, match="data is a tuple; give .*from_tensor_slices"):
        tfyard.fit(_dense, (images, np.zeros(32)), num_classes=10, quiet=True)


def test_train_steps_beyond_a_finite_input_repeat_it(tmp_path):
    """train_steps counts steps, as for a registry dataset: 5 steps over a 2-batch input
    are 2.5 passes over it, not a refusal."""
    def two_batches(context):
        return tf.data.Dataset.from_tensor_slices(
            (np.zeros((8, 4, 4, 1), "float32"), np.zeros(8, "int32"))).batch(4)

    summary = tfyard.fit(_dense, two_batches, num_classes=10, train_steps=5, steps_per_loop=1,
                         output_dir=str(tmp_path / "out"), num_gpus="0", quiet=True,
                         export=False, jit_compile=False)
    steps = [r["step"] for r in read_jsonl(tmp_path / "out" / "metrics.jsonl")
             if r["kind"] == "train"]
    assert steps[-1] == summary["final_step"] == 5 and summary["epochs"] == 2.5, summary


def test_a_resumed_input_fn_continues_after_the_step_reached(tmp_path):
    """A rerun to more steps reads the batches after those already trained, not the first
    ones again: labels encode the batch number, so the reported accuracy tells them apart."""
    def input_fn(context):
        images = np.zeros((40, 2, 2, 1), "float32")
        return tf.data.Dataset.from_tensor_slices(
            (images, np.repeat(np.arange(10, dtype="int32"), 4))).batch(4)

    def constant(input_shape):   # predicts class 9 whatever it sees
        model = keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                                  keras.layers.Dense(10)])
        model.layers[-1].set_weights([np.zeros((4, 10), "float32"),
                                      np.eye(10, dtype="float32")[9] * 10])
        return model

    out = str(tmp_path / "out")
    common = dict(output_dir=out, steps_per_loop=1, num_gpus="0", quiet=True, export=False,
                  jit_compile=False, learning_rate=1e-9, checkpoint_every_steps=1)
    tfyard.fit(constant, input_fn, train_steps=9, **common)
    tfyard.fit(constant, input_fn, train_steps=10, **common)
    records = [r for r in read_jsonl(tmp_path / "out" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in records][-2:] == [9, 10]
    assert records[-1]["top1"] == 1.0     # step 10 saw batch 9 (class 9), not batch 0
