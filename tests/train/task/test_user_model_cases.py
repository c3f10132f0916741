"""The user's own model (issue 21), the cases the main tests leave out: evaluation over two
replicas with an uneven last batch, a model that outputs probabilities, mixed precision, and
a model of several inputs. Tiny models written here, a few steps each."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfyard
from tests.train.conftest import read_jsonl
from tfyard.errors import UserError

COMMON = dict(num_gpus="0", quiet=True, jit_compile=False, steps_per_loop=1)

# Logical devices must be set before TensorFlow initialises, which this process has done.
TWO_REPLICAS = """
import json
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from tfyard import compat
from tfyard.train.loop.evaluation import model_evaluation
from tfyard.train.task.objectives import Classification, Compiled
from tfyard.train.task.task import compiled_loss

def build():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((6, 6, 1)), keras.layers.Conv2D(4, 3),
                              keras.layers.Flatten(), keras.layers.Dense(10)])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(3)])
    return model

def figures(model, input_fn, strategy=None):
    metrics = compat.compiled_metrics(model, tf.zeros([1], tf.int32), tf.zeros([1, 10]))
    return [model_evaluation(model, objective, strategy)(input_fn)
            for objective in (Classification(10), Compiled(compiled_loss(model), metrics))]

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
single = build()
with strategy.scope():
    mirrored = build()
    mirrored.set_weights(single.get_weights())
rng = np.random.default_rng(0)
results = {}
for size, static in ((37, False), (40, True)):   # 5 per-replica batches of 8 either way
    x = rng.normal(size=(size, 6, 6, 1)).astype("float32")
    y = rng.integers(0, 10, size=size).astype("int32")
    w = rng.uniform(0.5, 2.0, size=size).astype("float32")

    def input_fn(context, x=x, y=y, w=w, static=static):
        return tf.data.Dataset.from_tensor_slices((x, y, w)).batch(8, drop_remainder=static)

    with strategy.scope():
        on_two = figures(mirrored, input_fn, strategy)
    logits = single(x).numpy()
    per_example = np.asarray(keras.losses.sparse_categorical_crossentropy(y, logits, True))
    results[f"{size} {'static' if static else 'dynamic'}"] = {
        "one": figures(single, input_fn), "two": on_two,
        "loss": float((per_example * w).sum() / w.sum()),
        "top1": float((w * (logits.argmax(-1) == y)).sum() / w.sum())}
print(json.dumps({"replicas": strategy.num_replicas_in_sync, "results": results}))
"""


def test_mirrored_evaluation_over_two_replicas_equals_one_device():
    """Same weights; weighted examples in 5 per-replica batches of 8 (37 examples: the last
    batch has 5; 40 with drop_remainder: every batch has a static size), so the last step
    gives one replica a batch and the other none. The figures over two replicas equal those
    on one device, and both equal the weighted figures over every example (rtol 1e-5:
    float32 sums added in another order)."""
    done = subprocess.run([sys.executable, "-c", TWO_REPLICAS], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2
    for case, got in result["results"].items():
        for one, two in zip(got["one"], got["two"], strict=True):
            assert set(one) == set(two), case
            for name in one:
                assert two[name] == pytest.approx(one[name], rel=1e-5), (case, name)
        classification, compiled = got["two"]
        for figures in (classification, compiled):
            assert figures["loss"] == pytest.approx(got["loss"], rel=1e-5), case
        assert classification["top1"] == pytest.approx(got["top1"], rel=1e-5), case
        assert compiled["accuracy"] == pytest.approx(got["top1"], rel=1e-5), case
        assert got["top1"] <= compiled["sparse_top_k_categorical_accuracy"] < 1, case


def test_a_softmax_model_compiled_on_probabilities_is_not_softmaxed_twice(tmp_path):
    """A model ending in softmax, compiled with `"sparse_categorical_crossentropy"` (a loss of
    probabilities): the first step reports Keras's loss of those probabilities, evaluation
    agrees with the exported model, and the SavedModel serves model(x) as it is."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(48, 4, 4, 1)).astype("float32")
    y = rng.integers(0, 5, size=48).astype("int32")

    def input_fn(context):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)

    def build(input_shape):
        keras.utils.set_random_seed(4)
        model = keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                                  keras.layers.Dense(5, activation="softmax")])
        model.compile(optimizer=keras.optimizers.SGD(0.5), metrics=["accuracy"],
                      loss="sparse_categorical_crossentropy")
        return model

    out = tmp_path / "out"
    summary = tfyard.fit(build, input_fn, eval_data=input_fn, output_dir=str(out),
                         epochs=3, **COMMON)
    losses = [r["loss"] for r in read_jsonl(out / "metrics.jsonl") if r["kind"] == "train"]
    first = keras.losses.sparse_categorical_crossentropy(y[:16], build((4, 4, 1))(x[:16]))
    assert losses[0] == pytest.approx(float(np.mean(first)), rel=1e-5)
    assert all(np.isfinite(losses)) and losses[6] < losses[0]   # batch 1, epochs 1 and 3

    exported = keras.saving.load_model(out / "export" / "model.keras")
    probabilities = exported(x).numpy()
    evaluated = summary["eval"]
    assert evaluated["loss"] == pytest.approx(float(np.mean(
        keras.losses.sparse_categorical_crossentropy(y, probabilities))), rel=1e-5)
    assert evaluated["accuracy"] == pytest.approx(np.mean(probabilities.argmax(-1) == y))
    loaded = tf.saved_model.load(str(out / "export" / "saved_model"))   # owns the weights
    served = loaded.serve(tf.constant(x))
    np.testing.assert_allclose(served["probabilities"].numpy(), probabilities, atol=1e-6)
    # a second softmax would show: these probabilities are far from their own softmax
    assert np.abs(tf.nn.softmax(probabilities).numpy() - probabilities).max() > 1e-2


class Subclassed(keras.Model):
    """A subclassed model whose __init__ takes a layer: Keras cannot rebuild it from a config."""

    def __init__(self, head):
        super().__init__()
        self.flatten, self.head = keras.layers.Flatten(), head

    def call(self, x, training=False):
        return self.head(self.flatten(x))


def test_a_subclassed_model_without_a_config_trains_and_serves(tmp_path):
    """It trains, evaluates and exports the SavedModel; model.keras and model.h5, which need a
    config, are left out with a warning instead of failing the finished run."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(32, 4, 4, 1)).astype("float32")
    y = rng.integers(0, 3, size=32).astype("int32")

    def input_fn(context):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)

    out = tmp_path / "out"
    summary = tfyard.fit(lambda: Subclassed(keras.layers.Dense(3)), input_fn,
                         eval_data=input_fn, num_classes=3, output_dir=str(out),
                         train_steps=3, **COMMON)
    assert summary["final_step"] == 3 and summary["eval"]["top1"] >= 0
    assert sorted(summary["export"]) == ["saved_model"], summary["export"]
    assert sorted(p.name for p in (out / "export").iterdir()) == ["class_names.txt", "saved_model"]
    loaded = tf.saved_model.load(str(out / "export" / "saved_model"))   # owns the weights
    assert loaded.serve(tf.constant(x))["probabilities"].shape == (32, 3)
    assert json.loads((out / "summary.json").read_text())["final_step"] == 3

    class _Hidden(Subclassed):   # Keras names it "__hidden": no valid root scope in a graph
        pass

    out = tmp_path / "hidden"
    with pytest.raises(UserError, match="SavedModel export failed after training: .*rerun"):
        tfyard.fit(lambda: _Hidden(keras.layers.Dense(3)), input_fn, num_classes=3,
                   output_dir=str(out), train_steps=2, checkpoint_every_steps=1, **COMMON)
    assert (out / "checkpoints").is_dir() and not list(out.glob(".export.tmp-*"))
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")][-1] == 2


@pytest.mark.parametrize("compiled, dtype, policy", [
    (False, "bfloat16", "mixed_bfloat16"),
    (True, "bfloat16", "mixed_bfloat16"),
    (True, "float16", "mixed_float16"),
])
def test_a_user_model_trains_in_mixed_precision(tmp_path, compiled, dtype, policy):
    """`dtype=` reaches the user's layers (float32 weights, low-precision compute), compiled
    or not; the loss stays finite and falls. float16 trains a compiled model's own
    optimizer under loss scaling."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(32, 6, 6, 1)).astype("float32")
    y = rng.integers(0, 10, size=32).astype("int32")
    built = []

    def input_fn(context):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)

    def build(num_classes, input_shape):
        keras.utils.set_random_seed(6)
        model = keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                                  keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(num_classes)])
        if compiled:
            model.compile(optimizer=keras.optimizers.SGD(0.1), metrics=["accuracy"],
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        built.append(model)
        return model

    out = tmp_path / "out"
    summary = tfyard.fit(build, input_fn, num_classes=10, output_dir=str(out), dtype=dtype,
                         epochs=4, learning_rate=0.1, export=False, **COMMON)
    model = built[0]
    assert model.dtype_policy.name == policy
    assert {layer.compute_dtype for layer in model.layers} == {dtype}
    assert {v.dtype for v in model.trainable_variables} == {"float32"}
    assert summary["dtype"] == dtype
    if compiled and dtype == "float16":
        assert summary["optimizer"] == "LossScaleOptimizer"
    losses = [r["loss"] for r in read_jsonl(out / "metrics.jsonl") if r["kind"] == "train"]
    assert len(losses) == 8 and all(np.isfinite(losses))
    assert abs(losses[0] - np.log(10)) < 1.0 and losses[6] < losses[0]   # batch 1, epochs 1, 4


def _two_inputs(input_shape):
    images, extra = keras.Input(input_shape, name="images"), keras.Input((3,), name="extra")
    features = keras.layers.Concatenate()([keras.layers.Flatten()(images), extra])
    return keras.Model([images, extra], keras.layers.Dense(10)(features))


@pytest.mark.parametrize("x, expected", [
    # x one tensor: the model is refused, naming its inputs and the fix
    (np.zeros((8, 4, 4, 1), "float32"), "the model has 2 inputs (images, extra) but tfyard "
                                        "feeds it one tensor x per batch; build it on one"),
    # x two tensors: the input is refused first; x must be a tensor
    ((np.zeros((8, 4, 4, 1), "float32"), np.zeros((8, 3), "float32")),
     "elements are ((tensor, tensor), tensor); they must be (x, y) or (x, y, sample_weight), "
     "each one tensor"),
])
def test_a_model_of_several_inputs_is_refused_before_any_step(tmp_path, x, expected):
    """tfyard feeds one tensor x, and the export serves one input: a model of several inputs
    gets one line before step 1 (or its input does, where x is not one tensor)."""
    def input_fn(context):
        return tf.data.Dataset.from_tensor_slices((x, np.zeros(8, "int32"))).batch(4)

    with pytest.raises(UserError, match=re.escape(expected)) as refused:
        tfyard.fit(_two_inputs, input_fn, num_classes=10, train_steps=2,
                   output_dir=str(tmp_path / "out"), **COMMON)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "out" / "metrics.jsonl").exists()
