"""A save as it goes to a bucket: its files, `.index` last, then the `checkpoint` pointer
naming it. The local pointer lists the saves the run keeps, but the bucket lacks those the
publisher skipped (it sends the newest save only, at most one a period), so the bucket's
pointer lists only the checkpoints whose `.index` the bucket holds: with the index sent
last, those are whole there, and a restore from the bucket never tries a missing one."""

from __future__ import annotations

import os

from tfyard.runfiles.layout import CHECKPOINTS, POINTER

FLAG = "--output_dir"
LATEST, PATHS, STAMPS = ("model_checkpoint_path", "all_model_checkpoint_paths",
                         "all_model_checkpoint_timestamps")
QUOTE = '"'


def send_save(objects, place, files: list[str], pointer: str, names: set[str]) -> None:
    """Upload a save's `files` and then the `pointer` file naming it to `place` (a run's
    prefix in the store `objects`); `names`, what the prefix holds, gains what went up."""
    for file in sorted(files, key=lambda path: (path.endswith(".index"), path)):
        name = f"{CHECKPOINTS}/{os.path.basename(file)}"
        objects.upload(file, place.child(name), FLAG)
        names.add(name)
    with open(pointer, encoding="utf-8") as handle:
        text = held_only(handle.read(), names)
    objects.put(place.child(f"{CHECKPOINTS}/{POINTER}"), text.encode(), FLAG)
    names.add(f"{CHECKPOINTS}/{POINTER}")


def held_only(text: str, names: set[str]) -> str:
    """The pointer `text` (TensorFlow's text format, one field a line) listing, besides its
    latest checkpoint, only those whose `.index` is among `names`, each with its timestamp."""
    fields: dict[str, list[str]] = {PATHS: [], STAMPS: [], LATEST: []}
    others = []
    for line in text.splitlines():
        key, _, value = line.partition(": ")
        fields.get(key, others).append(value if key in fields else line)
    paths, stamps = fields[PATHS], fields[STAMPS]
    kept = [at for at, value in enumerate(paths)
            if value in fields[LATEST] or _index(value) in names]
    return "".join(f"{line}\n" for line in [
        *(f"{LATEST}: {value}" for value in fields[LATEST]), *others,
        *(f"{PATHS}: {paths[at]}" for at in kept),
        *(f"{STAMPS}: {stamps[at]}" for at in kept if len(stamps) == len(paths))])


def _index(value: str) -> str:
    """The name of the `.index` of the checkpoint a pointer's quoted `value` names."""
    return f"{CHECKPOINTS}/{os.path.basename(value.strip(QUOTE))}.index"
