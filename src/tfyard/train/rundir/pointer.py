"""A save as it goes to a bucket, by one publisher (`publish_save`) for the run's own
publisher, a rerun's reconcile and a PBT handover: its files, `.index` last, then the
`checkpoint` pointer naming it. The local pointer lists the saves the run keeps, but the bucket
lacks those the publisher skipped (it sends the newest save only, at most one a period), so the
bucket's pointer lists only the checkpoints whose `.index` the bucket holds: with the index
sent last, those are whole there, and a restore from the bucket never tries a missing one."""

from __future__ import annotations

import os

from tfyard.runfiles.layout import CHECKPOINTS, INDEX, POINTER, RunDirectory

PTR = f"{CHECKPOINTS}/{POINTER}"


def publish_save(bucket, url: str, files: list[str], pointer: str, names: set[str],
                 alone: bool = False) -> str:
    """Publish a save to the run at `url` through `bucket` (its `objects.BucketFiles`),
    complete or absent: a checkpoint of its name there made unreadable first (its `.index`
    removed: never a mix of two), its `files` sent with `.index` last, then the `pointer` file
    as the prefix holds it (`_held`), then the checkpoint files that pointer no longer names
    removed. `names`, what the prefix holds, is kept up to date. `alone`: the save replaces
    every checkpoint there (a PBT handover). Returns the pointer's text as sent."""
    run = RunDirectory(url)
    sent = {f"{CHECKPOINTS}/{os.path.basename(file)}" for file in files}
    index = next(name for name in sent if name.endswith(INDEX))
    if index in names:
        bucket.remove(run.path(index))
        names.discard(index)
    replaced = {name for name in names if name.startswith(CHECKPOINTS + "/")} if alone else set()
    names -= replaced
    for file in sorted(files, key=lambda path: (path.endswith(INDEX), path)):
        name = f"{CHECKPOINTS}/{os.path.basename(file)}"
        bucket.upload(file, run.path(name))
        names.add(name)
    state = _held(os.path.dirname(pointer), names)
    text = _text(state)
    bucket.write_whole(run.pointer, text)
    names.add(PTR)
    saved = os.path.basename(index).removesuffix(INDEX)
    listed = {os.path.basename(path) for path in state.all_model_checkpoint_paths} - {saved}
    for name in sorted((names | replaced) - sent - {PTR}):
        folder, _, file = name.rpartition("/")
        if folder == CHECKPOINTS and file.split(".")[0] not in listed:   # of no save named,
            bucket.remove(run.path(name))   # or a leftover of this one's name
            names.discard(name)
    return text


def _held(folder: str, names: set[str]):
    """The pointer of `folder` (read by TensorFlow, as `directory.checkpoint_paths` reads
    one) listing, besides its latest checkpoint, only those whose `.index` is among
    `names`, each with its timestamp; names relative."""
    import tensorflow as tf

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
    return state


def _text(state) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(state)
