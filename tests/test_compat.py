"""One test per shim in tfyard.compat: after a TensorFlow or Keras upgrade, these say which
internal moved."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfyard import compat

# What each fresh process prints last: whether oneDNN is on, which TensorFlow reads from
# TF_ENABLE_ONEDNN_OPTS once per process (so each value needs a process of its own).
ONEDNN = "print(compat.onednn_enabled())"


def _run(code: str, onednn: str) -> list[str]:
    """Run `code` in a fresh process (it connects to a cluster, which a process does once)
    with TF_ENABLE_ONEDNN_OPTS=`onednn`; the lines it printed."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=300, env={**os.environ,
                                                      "TF_ENABLE_ONEDNN_OPTS": onednn})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


@pytest.fixture(scope="module")
def parameter_servers() -> list[str]:
    """A fresh process (oneDNN switched off) that counts a parameter-server strategy's
    workers, then says whether oneDNN is on."""
    return _run("""
        import tensorflow as tf
        from tfyard import compat
        from tfyard.launch.ports import reserved_ports

        with reserved_ports(3) as ports:
            jobs = {"worker": [f"127.0.0.1:{p}" for p in ports[:2]],
                    "ps": [f"127.0.0.1:{ports[2]}"]}
            spec = tf.train.ClusterSpec(jobs)
            servers = [tf.distribute.Server(spec, job, i, protocol="grpc")
                       for job in jobs for i in range(len(jobs[job]))]
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
        print(compat.worker_count(tf.distribute.experimental.ParameterServerStrategy(resolver)))
        """ + ONEDNN, "0")


@pytest.fixture(scope="module")
def barrier() -> list[str]:
    """A fresh process (oneDNN forced on) that waits at a barrier of a one-worker cluster,
    shares a value in it and reads it back, then says whether oneDNN is on."""
    return _run("""
        import json, os
        import tensorflow as tf
        from tfyard import compat
        from tfyard.launch.ports import reserved_ports

        with reserved_ports(1) as (port,):
            os.environ["TF_CONFIG"] = json.dumps({
                "cluster": {"worker": [f"127.0.0.1:{port}"]},
                "task": {"type": "worker", "index": 0}})
            tf.distribute.MultiWorkerMirroredStrategy()
        compat.wait_at_barrier("end", 5000)
        print("passed")
        compat.share_in_cluster("tfyard-test", "shared-value")
        print(compat.shared_in_cluster("tfyard-test", 5000))
        """ + ONEDNN, "1")


def test_all_layers_reaches_nested_models_once():
    inner = keras.Sequential([keras.layers.Dense(2, name="inner_dense")], name="inner")
    images = keras.Input((3,))
    shared = keras.layers.Dense(3, name="shared")
    model = keras.Model(images, inner(shared(shared(images))), name="outer")
    layers = [layer for layer in compat.all_layers(model)
              if not isinstance(layer, keras.layers.InputLayer)]
    assert [layer.name for layer in layers] == ["outer", "shared", "inner", "inner_dense"]


def test_uses_renorm_is_the_layers_setting_and_false_before_keras_has_one():
    assert not compat.uses_renorm(keras.layers.BatchNormalization())
    if "renorm" in inspect.signature(keras.layers.BatchNormalization).parameters:  # 3.14+
        assert compat.uses_renorm(keras.layers.BatchNormalization(renorm=True))


def test_worker_count_of_a_parameter_server_strategy(parameter_servers):
    assert parameter_servers[0] == "2"


def test_supports_no_merge_call_is_false_only_where_the_update_merges():
    assert compat.supports_no_merge_call()
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        assert not compat.supports_no_merge_call()


def test_wait_at_barrier_refuses_without_a_coordination_service():
    with pytest.raises(tf.errors.FailedPreconditionError):
        compat.wait_at_barrier("alone", 1000)


def test_wait_at_barrier_returns_once_every_member_arrived(barrier):
    assert barrier[0] == "passed"


def test_a_value_shared_in_the_cluster_is_read_back(barrier):
    assert barrier[1] == "shared-value"


def test_a_shared_value_refuses_without_a_coordination_service():
    with pytest.raises(tf.errors.OpError):
        compat.shared_in_cluster("alone", 1000)


def _two_output_model():
    images = keras.Input((4,))
    outputs = {"a": keras.layers.Dense(3, name="a")(images),
               "b": keras.layers.Dense(3, activation="softmax", name="b")(images)}
    model = keras.Model(images, outputs)
    model.compile("sgd", loss={"a": "mse", "b": "sparse_categorical_crossentropy"},
                  loss_weights={"a": 0.5, "b": 1.0},
                  metrics={"a": ["mae", "mae"], "b": ["accuracy"]},
                  weighted_metrics={"b": ["accuracy"]})
    return model


def _batch():
    rng = np.random.default_rng(0)
    x = rng.random((8, 4), dtype=np.float32)
    return x, {"a": rng.random((8, 3), dtype=np.float32), "b": rng.integers(0, 3, (8, 1))}


def test_compiled_loss_applies_per_output_losses_and_weights():
    model = _two_output_model()
    x, y = _batch()
    pred = model(x)
    expected = 0.5 * keras.losses.MeanSquaredError()(y["a"], pred["a"]) \
        + keras.losses.SparseCategoricalCrossentropy()(y["b"], pred["b"])
    np.testing.assert_allclose(compat.compiled_loss(model)(y, pred), expected, rtol=1e-6)
    assert compat.compiled_loss(keras.Sequential([keras.layers.Dense(1)])) is None


def test_compiled_metrics_are_built_from_specs_and_named_as_fit_reports_them():
    model = _two_output_model()
    x, y = _batch()
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        metrics = compat.compiled_metrics(
            model, {"a": keras.KerasTensor((8, 3)), "b": keras.KerasTensor((8, 1), "int32")},
            {"a": keras.KerasTensor((8, 3)), "b": keras.KerasTensor((8, 3))})
    assert list(metrics) == ["a_mae", "a_mae_1", "b_accuracy", "b_weighted_accuracy"]
    assert all(float(v.numpy()) == 0 for m in metrics.values() for v in m.variables)
    reported = model.evaluate(x, y, return_dict=True, verbose=0)
    assert set(metrics) <= set(reported)
    assert compat.compiled_metrics(model, y, model(x)) == metrics  # built once
    assert compat.compiled_metrics(keras.Sequential([keras.layers.Dense(1)]), y, x) == {}


def test_onednn_enabled_follows_tensorflows_switch(parameter_servers, barrier):
    """TF_ENABLE_ONEDNN_OPTS=0 turns it off, =1 on, whatever the CPU's default."""
    assert parameter_servers[-1] == "False"
    assert barrier[-1] == "True"


def test_weight_positions_are_the_keys_of_keras_own_weight_files(tmp_path):
    """Every weight of a nested model, under the path Keras's own `.weights.h5` stores it."""
    import h5py

    inner = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)], name="inner")
    images = keras.Input((3,))
    normalized = keras.layers.BatchNormalization()(keras.layers.Dense(3)(images))
    model = keras.Model(images, inner(normalized))
    positions = compat.weight_positions(model)
    model.save_weights(tmp_path / "m.weights.h5")
    with h5py.File(tmp_path / "m.weights.h5") as handle:
        for position, weight in positions.items():
            assert np.array_equal(handle[position][()], weight.numpy()), position
    assert sorted(map(id, positions.values())) == sorted(map(id, model.weights))


def test_every_shim_names_the_version_it_was_checked_against():
    shims = [f for name, f in inspect.getmembers(compat, inspect.isfunction)
             if f.__module__ == compat.__name__]
    assert len(shims) == 13
    assert all("Checked against" in " ".join(f.__doc__.split()) for f in shims)


def test_local_gpus_lists_none_where_the_suite_hides_them():
    """device_lib's fields are read (an upgrade that renames them fails here); the GPU
    slice (tests/gpu) reads two logical GPUs of one card through it."""
    assert compat.local_gpus() == []


def test_a_scope_left_open_by_a_failed_trace_is_closed():
    """A scope entered and never exited (as a failed SavedModel trace of a model named
    `__hidden` leaves it) is gone afterwards: the next model's weights carry no prefix."""
    from keras.src.backend.common.name_scope import name_scope

    with pytest.raises(RuntimeError), compat.name_scopes_kept():
        name_scope("__hidden_1").__enter__()   # Keras's stack only, as the failed trace left it
        raise RuntimeError("the trace failed")
    layer = keras.layers.Dense(2, name="after")
    layer.build((None, 3))
    assert layer.kernel.path == "after/kernel"
