"""The weights of a trained source, read without running any of its code.

The sources `--init_checkpoint` takes: a tfyard run directory (its newest checkpoint), a
directory of checkpoints, a checkpoint prefix (`out/checkpoints/ckpt-200`), a `.keras` file,
a `.weights.h5` file, and a legacy Keras `.h5` file (a full model, or weights only: the
layout of the ImageNet weight files Keras Applications publish).

Only arrays are read: no model config is deserialized, no custom object or Lambda layer is
built and nothing is unpickled, so a weight file from the internet cannot run Python.
Each source names its weights the way its format does:
- a weight path (`conv1/kernel`) in checkpoints (the variable's name when it was saved) and
  in legacy `.h5` files (their `weight_names`);
- a position path (`layers/conv2d/vars/0`) in Keras 3 `.keras` and `.weights.h5` files,
  which name layers by class and order (`train.pretrained` translates them).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from tfyard.errors import UserError, plain_op_error
from tfyard.runfiles.layout import CHECKPOINTS, DATA, INDEX, RunDirectory
from tfyard.storage import readable_path
from tfyard.train.rundir.directory import checkpoint_paths

FLAG = "--init_checkpoint"
FORMS = ("a run directory, a checkpoint prefix (out/checkpoints/ckpt-200), a .keras file, "
         "a .weights.h5 file or a Keras .h5 file")
_SKIPPED_ROOTS = ("optimizer",)   # Keras 3 files: the optimizer's slots are never taken
# A checkpoint's objects besides the model: never taken (a fine-tune starts at step 0).
_NOT_WEIGHTS = ("step", "save_counter", "optimizer", "seeds")


@dataclass
class Source:
    """A source's weights: `shapes[key]`, and `read(key)` gives the array."""

    given: str                      # as the user gave it
    path: str                       # the file or checkpoint prefix read
    kind: str                       # "checkpoint" | "keras" | "weights.h5" | "legacy .h5"
    positional: bool                # keys are Keras 3 position paths
    shapes: dict[str, tuple[int, ...]]
    read: Callable[[str], np.ndarray] = field(repr=False)
    files: list[str] = field(repr=False)

    def fingerprint(self) -> str:
        """sha256 over the bytes of every file read, so run.json pins the exact weights."""
        digest = hashlib.sha256()
        for name in self.files:
            with open(name, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        return "sha256:" + digest.hexdigest()


@contextlib.contextmanager
def open_source(given: str, work_dir: str | None = None) -> Iterator[Source]:
    """The weights at `given` (any form in the module docstring), open while in use; in a
    bucket, read from their copy under `work_dir`."""
    path = os.path.abspath(os.path.expanduser(readable_path(given, work_dir, FLAG)))
    if os.path.isdir(path):
        yield _checkpoint(given, _newest_checkpoint(given, path))
    elif os.path.exists(path + INDEX):
        yield _checkpoint(given, path)
    elif not os.path.exists(path):
        raise UserError(f"{FLAG} {given}: no such file or directory; give {FORMS}")
    elif zipfile.is_zipfile(path):
        with _keras_archive(given, path) as source:
            yield source
    else:
        with _h5(given, path, path) as source:
            yield source


def _newest_checkpoint(given: str, path: str) -> str:
    """A run directory's newest checkpoint, or a checkpoint directory's."""
    run = RunDirectory(path)
    directory = run.checkpoints if run.files.is_directory(run.checkpoints) else path
    found = checkpoint_paths(directory)
    if not found:
        raise UserError(f"{FLAG} {given}: no checkpoint in this directory (a finished or "
                        f"interrupted run has them in {CHECKPOINTS}/); give {FORMS}")
    return found[0]


def _checkpoint(given: str, prefix: str) -> Source:
    """A TensorFlow checkpoint: the weights under its `model` object (tfyard's layout), or
    every variable when it has no such object; never the step, optimizer or seeds."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
        keys = _model_variables(reader)
        shape_map = reader.get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError) as exc:
        raise UserError(f"{FLAG} {given}: checkpoint {prefix} cannot be read "
                        f"({plain_op_error(exc)[:160]}); give {FORMS}") from None
    shapes = {name: tuple(shape_map[key]) for name, key in keys.items()}
    files = [prefix + INDEX, *sorted(tf.io.gfile.glob(prefix + DATA + "*"))]
    return Source(given, prefix, "checkpoint", False, shapes,
                  lambda name: np.asarray(reader.get_tensor(keys[name])), files)


def _model_variables(reader) -> dict[str, str]:
    """weight path -> checkpoint key, from the object graph (under its `model` child when
    there is one); a checkpoint without an object graph (TF1) keeps its variable names."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    names = reader.get_variable_to_shape_map()
    if "_CHECKPOINTABLE_OBJECT_GRAPH" not in names:
        return {name: name for name in names}
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    root = graph.nodes[0]
    model = [c.node_id for c in root.children if c.local_name == "model"]
    start = model or [c.node_id for c in root.children if c.local_name not in _NOT_WEIGHTS]
    found, seen, todo = {}, set(start), list(start)
    while todo:
        node = graph.nodes[todo.pop()]
        for attribute in node.attributes:
            if attribute.name == "VARIABLE_VALUE":
                found[attribute.full_name or attribute.checkpoint_key] = attribute.checkpoint_key
        for child in node.children:
            if child.node_id not in seen:
                seen.add(child.node_id)
                todo.append(child.node_id)
    return dict(sorted(found.items(), key=lambda item: _natural(item[1])))


def _natural(key: str) -> list:
    """`_operations/2` before `_operations/10`: the model's own order of layers."""
    return [int(part) if part.isdecimal() else part for part in re.split(r"(\d+)", key)]


@contextlib.contextmanager
def _keras_archive(given: str, path: str) -> Iterator[Source]:
    """A `.keras` file: only its weights member is read (extracted beside nothing else)."""
    with zipfile.ZipFile(path) as archive:
        member = next((n for n in archive.namelist() if n.endswith(".weights.h5")), None)
        if member is None:
            raise UserError(f"{FLAG} {given}: this zip file holds no Keras weights "
                            f"(model.weights.h5); give {FORMS}")
        with tempfile.TemporaryDirectory(prefix="tfyard-init-") as scratch:
            extracted = archive.extract(member, scratch)
            with _h5(given, extracted, path, kind="keras") as source:
                yield source


@contextlib.contextmanager
def _h5(given: str, path: str, original: str, kind: str | None = None) -> Iterator[Source]:
    """An HDF5 weights file: the legacy Keras layout (`layer_names`, `weight_names`, a
    full model's under `model_weights`) or Keras 3's (`layers/.../vars/N`)."""
    import h5py

    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise UserError(f"{FLAG} {given}: not a weights file ({plain_op_error(exc)[:160]}); "
                        f"give {FORMS}") from None
    with handle:
        root = handle["model_weights"] if "model_weights" in handle else handle
        if "layer_names" in root.attrs:
            datasets = _legacy_datasets(root)
            source_kind, positional = "legacy .h5", False
        else:
            datasets = _keras3_datasets(handle)
            source_kind, positional = kind or "weights.h5", True
        if not datasets:
            raise UserError(f"{FLAG} {given}: the file holds no weights; give {FORMS}")
        shapes = {key: tuple(dataset.shape) for key, dataset in datasets.items()}
        yield Source(given, original, source_kind, positional, shapes,
                     lambda key: np.asarray(datasets[key][()]), [original])


def _legacy_datasets(root) -> dict:
    """weight path (`conv1_conv/kernel`) -> dataset, in the Keras 2 / Applications layout."""
    found = {}
    for layer in root.attrs["layer_names"]:
        group = root[_text(layer)]
        for name in group.attrs.get("weight_names", []):
            name = _text(name)
            found[name.removesuffix(":0")] = group[name]
    return found


def _keras3_datasets(handle) -> dict:
    """position path (`layers/conv2d/vars/0`) -> dataset, optimizer slots left out."""
    import h5py

    found = {}

    def visit(name, item):
        if isinstance(item, h5py.Dataset) and not name.startswith(_SKIPPED_ROOTS):
            found[name] = item

    handle.visititems(visit)
    return found


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)

