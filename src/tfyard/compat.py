"""The TensorFlow and Keras internals tfyard relies on, and what differs between the Keras
versions it supports (3.12 on Python 3.10 to 3.15), each behind one function here.

TensorFlow and Keras give no public way to do these things, so an upgrade may break them.
Each shim names the versions it was checked against, and tests/test_compat.py tests each
one: an upgrade is checked in these two files, and `make matrix` runs them on every
supported Python and on the lowest declared versions. Importing this module imports TensorFlow
and Keras.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf
from keras.src.backend import compute_output_spec
from tensorflow.python.eager import context
from tensorflow.python.util import _pywrap_util_port


def all_layers(model) -> list:
    """`model` and every layer nested in it, each once: `model.layers` stops at the top
    level. Checked against Keras 3.12 and 3.15."""
    return model._flatten_layers()


def uses_renorm(layer) -> bool:
    """Whether a BatchNormalization renormalises its batch statistics: Keras 3.14 added
    `renorm`; before it (Keras 3.12 and 3.13, what Python 3.10 gets) no layer does.
    Checked against Keras 3.12 and 3.15."""
    return bool(getattr(layer, "renorm", False))


def worker_count(strategy) -> int:
    """The workers a ParameterServerStrategy schedules on: it keeps no public count (its
    `cluster_resolver` is None). Checked against TensorFlow 2.21."""
    return strategy._num_workers


def supports_no_merge_call() -> bool:
    """Whether the current strategy's optimizer update syncs without a `merge_call`, so a
    `tf.cond` around it may stay in the replica context. Checked against TensorFlow 2.21."""
    return tf.__internal__.distribute.strategy_supports_no_merge_call()


def onednn_enabled() -> bool:
    """Whether TensorFlow runs its oneDNN CPU kernels (on by default on CPUs with AVX-512
    VNNI/BF16 or AMX; TF_ENABLE_ONEDNN_OPTS overrides), which only its build utilities say.
    Checked against TensorFlow 2.21."""
    return bool(_pywrap_util_port.IsMklEnabled())


def local_gpus() -> list[tuple[str, int, str]]:
    """(name, memory limit in bytes, the card as TensorFlow describes it) of each logical GPU
    of this process: two carved from one card name the same card. Only TensorFlow's
    device_lib reads a logical device's memory and card. Checked against TensorFlow 2.21."""
    from tensorflow.python.client import device_lib

    return [(device.name, device.memory_limit, device.physical_device_desc)
            for device in device_lib.list_local_devices() if device.device_type == "GPU"]


def wait_at_barrier(name: str, timeout_ms: int) -> None:
    """Block until every member of the cluster's coordination service reaches barrier `name`
    (a `tf.errors.OpError` on a timeout, a failed member, or no coordination service).
    Checked against TensorFlow 2.21."""
    context.context().wait_at_barrier(name, timeout_ms)


def share_in_cluster(key: str, value: str) -> None:
    """Put `value` under `key` in the cluster's coordination service, for every member to
    read (`shared_in_cluster`); it lives as long as this start of the cluster. Checked
    against TensorFlow 2.21."""
    context.context().set_config_key_value(key, value)


def shared_in_cluster(key: str, timeout_ms: int) -> str:
    """The value a member put under `key` (`share_in_cluster`), waited for up to
    `timeout_ms` (a `tf.errors.OpError` then, or without a coordination service). Checked
    against TensorFlow 2.21."""
    return context.context().get_config_key_value(key, timeout_ms)


def compiled_loss(model):
    """The loss `model.compile(loss=...)` set up, as Keras trains with it: `(y_true, y_pred,
    sample_weight=None)` -> one replica's scalar, per-output losses and `loss_weights`
    applied (`model.loss` is only what the user passed). None without a compiled loss.
    Checked against Keras 3.12 and 3.15."""
    return model._compile_loss


def compiled_metrics(model, y_true, y_pred) -> dict:
    """The metric objects `model.compile(metrics=, weighted_metrics=)` asked for, flat, by
    the names `fit` reports (`<output>_<metric>`, repeats numbered); {} without any.

    Built, the first time, for batches shaped like `y_true`, `y_pred` (tensors or
    `keras.KerasTensor`s), as Keras builds them before `fit`: call it inside the strategy
    scope, which then owns their variables. Checked against Keras 3.12 and 3.15.
    """
    metrics = model._compile_metrics
    if metrics is None:
        return {}
    if not metrics.built:
        compute_output_spec(metrics.update_state, y_true, y_pred)
    return dict(zip(compute_output_spec(metrics.result), metrics.metrics, strict=True))


@contextlib.contextmanager
def name_scopes_kept():
    """Keras's name-scope stack as it was, even when tracing inside fails: a model whose
    name TensorFlow refuses as a scope (`__hidden`) leaves its Keras scope on the stack,
    and every weight built after it in the process would carry its prefix. Checked against
    Keras 3.12 and 3.15."""
    from keras.src.backend.common import global_state

    stack = global_state.get_global_attribute("name_scope_stack", default=[],
                                              set_to_default=True)
    before = list(stack)
    try:
        yield
    finally:
        stack[:] = before


def weight_positions(model) -> dict[str, object]:
    """Keras 3's position path of each weight of `model` (`layers/conv2d/vars/0`: layers
    named by class and order), as `.keras` and `.weights.h5` files key them -> the weight.
    Keras's own saving walk runs into a store that keeps nothing but the references.
    Checked against Keras 3.12 and 3.15."""
    from keras.src.saving import saving_lib

    store = saving_lib.NpzIOStore(None, mode="w")   # in memory; written only by close()
    saving_lib._save_state(model, store, None, inner_path="", visited_saveables=set())
    weights = {id(w): w for w in model.weights}
    return {f"{path}/vars/{key}" if path != "__root__" else f"vars/{key}": weights[id(value)]
            for path, values in store.contents.items() for key, value in values.items()
            if id(value) in weights}
