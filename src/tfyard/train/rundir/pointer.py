"""A save as it goes to a bucket: its files, `.index` last, then the `checkpoint` pointer
naming it. The local pointer lists the saves the run keeps, but the bucket lacks those the
publisher skipped (it sends the newest save only, at most one a period), so the bucket's
pointer lists only the checkpoints whose `.index` the bucket holds: with the index sent
last, those are whole there, and a restore from the bucket never tries a missing one."""

from __future__ import annotations

import os

from tfyard.flags import OUTPUT_FLAG
from tfyard.runfiles.layout import CHECKPOINTS, INDEX, POINTER


def send_save(objects, place, files: list[str], pointer: str, names: set[str]) -> None:
    """Upload a save's `files` and then the `pointer` file naming it to `place` (a run's
    prefix in the store `objects`); `names`, what the prefix holds, gains what went up."""
    for file in sorted(files, key=lambda path: (path.endswith(INDEX), path)):
        name = f"{CHECKPOINTS}/{os.path.basename(file)}"
        objects.upload(file, place.child(name), OUTPUT_FLAG)
        names.add(name)
    text = held_only(os.path.dirname(pointer), names)
    objects.put(place.child(f"{CHECKPOINTS}/{POINTER}"), text.encode(), OUTPUT_FLAG)
    names.add(f"{CHECKPOINTS}/{POINTER}")


def held_only(folder: str, names: set[str]) -> str:
    """The pointer of `folder` (read by TensorFlow, as `directory.checkpoint_paths` reads
    one) listing, besides its latest checkpoint, only those whose `.index` is among
    `names`, each with its timestamp; in TensorFlow's text format, names relative."""
    import tensorflow as tf
    from google.protobuf import text_format

    state = tf.train.get_checkpoint_state(folder)
    latest = os.path.basename(state.model_checkpoint_path)
    paths = [os.path.basename(path) for path in state.all_model_checkpoint_paths]
    stamps = list(state.all_model_checkpoint_timestamps)
    kept = [at for at, name in enumerate(paths)
            if name == latest or f"{CHECKPOINTS}/{name}{INDEX}" in names]
    state.model_checkpoint_path = latest   # TensorFlow joined the names to `folder`
    del state.all_model_checkpoint_paths[:], state.all_model_checkpoint_timestamps[:]
    state.all_model_checkpoint_paths.extend(paths[at] for at in kept)
    if len(stamps) == len(paths):
        state.all_model_checkpoint_timestamps.extend(stamps[at] for at in kept)
    return text_format.MessageToString(state)
