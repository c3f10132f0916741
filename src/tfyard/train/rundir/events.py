"""TensorBoard's events files of a resumed run, so that each step shows its latest value only,
as `metrics.jsonl` does (`report.Reporter`).

A resume from checkpoint N runs the steps after N again, and each process writes a new
events file, so without this every reader (TensorBoard with either loader, `tf.data`,
`tfyard`'s own) sees those steps twice. TensorBoard's own remedy (a SessionLog START event
purging later steps) is honoured by its Python loader only, and TensorFlow 2's writers
cannot write one, so the files are rewritten instead: before a resumed run writes, the
values of steps after N are dropped from its older files, and of one tag and step held
twice (a copy and its bucket joined after an outage) the later one is kept. Records are
kept byte for byte (TFRecord framing and checksums included); a record torn by a kill ends
its file's read, as it ends TensorBoard's.
"""

from __future__ import annotations

import glob
import os

from tfyard.data.formats.framing import FOOTER, HEADER, record_end
from tfyard.runfiles.files import files_for
from tfyard.runfiles.layout import EVENTS


def keep_latest(folder: str, start: int) -> None:
    """Rewrite the events files in `folder` whole without the values of a step after `start`
    and without a value that a later event of the same tag and step replaces."""
    files = files_for(folder)
    paths = sorted(files.matching(os.path.join(glob.escape(folder), EVENTS + "*")))
    read = {path: _events(files.read_from(path, 0)) for path in paths}
    latest: dict = {}
    for records in read.values():
        for _, event in records:
            key = _key(event)
            if key is not None:
                latest[key] = max(latest.get(key, event.wall_time), event.wall_time)
    for path, records in read.items():
        kept = [raw for raw, event in records if _kept(event, start, latest)]
        if len(kept) < len(records):
            files.write_whole(path, b"".join(kept))


def _key(event) -> tuple | None:
    """A summary event's tags and step (TensorFlow 2 writes one value an event)."""
    if not event.HasField("summary"):
        return None
    return tuple(value.tag for value in event.summary.value), event.step


def _kept(event, start: int, latest: dict) -> bool:
    key = _key(event)
    return key is None or (event.step <= start and event.wall_time >= latest[key])


def _events(data: bytes) -> list[tuple]:
    """The whole records of an events file's `data`, each with its framing, and its event;
    up to one torn or garbled."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.util import event_pb2

    records, offset = [], 0
    while offset + HEADER <= len(data):
        end = record_end(data[offset:offset + HEADER], offset)
        if end > len(data):
            break
        try:
            event = event_pb2.Event.FromString(data[offset + HEADER:end - FOOTER])
        except DecodeError:
            break
        records.append((data[offset:end], event))
        offset = end
    return records
