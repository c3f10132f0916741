"""TFRecord framing read in plain Python: counts, cached counts, and why a file is unreadable.

A record is an 8-byte little-endian length, a 4-byte CRC of it, the data and a 4-byte CRC
of the data. Walking the lengths counts records without reading or parsing them, so sizes
come from the data present (not from the shard names) at the cost of one seek per record,
and the counts are cached in the work dir so a job pays it once. Shards tfyard wrote need
no walk at all: `data convert` writes their counts beside them (`INDEX_FILE`), which a set
read from a bucket takes instead of fetching every shard to count it. Shards in a bucket
that tfyard did not write are walked once, by the first run to read them: it adds what it
walked to the index beside them there, keyed by each object's version, so later runs on any
node fetch none of them to count them (a read-only bucket keeps them in the work dir alone).
"""

from __future__ import annotations

import json
import logging
import os
import struct

from tfyard.errors import UserError
from tfyard.replace import replacing_file
from tfyard.storage import stream

CACHE_FILE = "tfrecord_counts.json"   # in the work dir: counts walked, by path or URL
# beside the shards: {name: [size, count]} as `data convert` wrote them, or
# {name: [size, version, count]} as a run reading them from a bucket walked them
INDEX_FILE = "shard_index.json"
CHECKSUM = "corrupted: the record fails its checksum (its bytes changed after it was written)"
HEADER, FOOTER = 12, 4   # a record's length and its CRC; the data's CRC
log = logging.getLogger("tfyard")


def record_end(header: bytes, position: int) -> int:
    """Where the record starting at `position` with that `HEADER`-byte `header` ends."""
    return position + HEADER + struct.unpack_from("<Q", header)[0] + FOOTER


def walk(path: str) -> tuple[int, str | None]:
    """(whole records, why the record after them cannot be read, or None) from the framing."""
    size, count = os.path.getsize(path), 0
    with open(path, "rb") as stream:
        while (position := stream.tell()) < size:
            header = stream.read(HEADER)
            if len(header) < HEADER:
                return count, (f"truncated: the file ends at byte {size}, inside the "
                               f"{HEADER}-byte header of the record starting at byte "
                               f"{position}")
            end = record_end(header, position)
            if end > size:
                return count, (f"truncated: the record at byte {position} declares "
                               f"{end - position - HEADER - FOOTER} bytes of data but the file "
                               f"ends {end - size} bytes short")
            stream.seek(end)
            count += 1
    return count, None


def count_records(path: str, strict: bool = True) -> int:
    """Whole records in `path`; with `strict` a truncated file is a one-line UserError."""
    count, problem = walk(path)
    if problem and strict:
        raise UserError(f"{path}: record {count}: {problem}; re-copy or re-convert it, or "
                        "pass --skip_corrupt")
    return count


def record_counts(files: list[str], cache_dir: str | None = None,
                  strict: bool = True) -> list[int]:
    """Records per file: from the index beside them where it names the file at its size (and
    version), else walked and cached in `cache_dir` by (absolute path, size, mtime), a file
    in a bucket's cache by (its URL, size, version), fetched once to be counted and its count
    added to the index beside it in the bucket."""
    cache = _load(cache_dir, CACHE_FILE)
    index = _load(os.path.dirname(files[0]), INDEX_FILE) if files else {}
    keys = [stream.identity(path) or _stamped(path) for path in files]
    known = [_known(path, key, stamp, index, cache)
             for path, (key, stamp) in zip(files, keys, strict=True)]
    stream.announce([path for path, count in zip(files, known, strict=True) if count is None])
    counts, walked = [], {}
    for path, (key, stamp), count in zip(files, keys, known, strict=True):
        if count is None:
            with stream.held(path):
                count, problem = walk(path)
                if problem is None:  # only whole files are cached; a truncated one is re-walked
                    cache[key] = walked[path] = [*stamp, count]
                else:
                    count = count_records(path, strict)
        counts.append(int(count))
    if walked:
        _save(cache_dir, cache)
        _index_beside({path: entry for path, entry in walked.items() if stream.streamed(path)})
    return counts


def write_index(folder: str, counts: dict[str, int]) -> None:
    """The index of the shards in `folder` just written, {name: records}: each name with its
    size and count, so that a reader counts none of them."""
    index = {name: [os.path.getsize(os.path.join(folder, name)), count]
             for name, count in sorted(counts.items())}
    with replacing_file(os.path.join(folder, INDEX_FILE)) as out:
        json.dump(index, out, indent=0)


def _index_beside(walked: dict[str, list]) -> None:
    """Add the counts `walked` of files in a bucket to the index beside them there; an index
    tfyard cannot read there is left as it is."""
    folders: dict[str, dict[str, list]] = {}
    for path, entry in walked.items():
        folders.setdefault(os.path.dirname(path), {})[os.path.basename(path)] = entry
    for folder, entries in folders.items():
        why = stream.amended_beside(os.path.join(folder, next(iter(entries))), INDEX_FILE,
                                    lambda body, entries=entries: _merged(body, entries))
        if why:
            log.info("tfyard: the record counts walked are kept in the work dir only, not "
                     "beside the data: %s", why)


def _merged(body: bytes | None, entries: dict[str, list]) -> bytes | None:
    """The index `body` with `entries` added; None when it already holds them, or when it
    is not an index tfyard wrote (which is left untouched)."""
    try:
        index = json.loads(body) if body is not None else {}
    except ValueError:
        index = None
    if not isinstance(index, dict) or not all(isinstance(entry, list)
                                              for entry in index.values()):
        log.info("tfyard: %s beside the data is not an index of record counts tfyard wrote; "
                 "it is left as it is", INDEX_FILE)
        return None
    if all(index.get(name) == entry for name, entry in entries.items()):
        return None
    return json.dumps({**index, **entries}, indent=0, sort_keys=True).encode()


def _known(path: str, key: str, stamp: list, index: dict, cache: dict) -> int | None:
    """The records of `path` as the index says (by name and size, or name, size and
    version) or the cache (by `key` and `stamp`); None when none knows this version of it."""
    named = index.get(os.path.basename(path))
    for entry, wanted in ((named, stamp[:1]), (named, stamp), (cache.get(key), stamp)):
        if isinstance(entry, list) and len(entry) == len(wanted) + 1 and entry[:-1] == wanted:
            return int(entry[-1])
    return None


def _stamped(path: str) -> tuple[str, list]:
    stat = os.stat(path)
    return os.path.abspath(path), [stat.st_size, stat.st_mtime_ns]


def _load(folder: str | None, name: str) -> dict:
    if not folder:
        return {}
    try:
        with open(os.path.join(folder, name), encoding="utf-8") as stream:
            cache = json.load(stream)
        return cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):  # absent, torn or unreadable: count again
        return {}


def _save(cache_dir: str | None, cache: dict) -> None:
    if not cache_dir:
        return
    try:
        os.makedirs(cache_dir, exist_ok=True)
        with replacing_file(os.path.join(cache_dir, CACHE_FILE)) as stream:
            json.dump(cache, stream)
    except OSError as exc:  # a read-only work dir costs a recount next time, nothing more
        log.warning("tfyard: cannot cache record counts in %s (%s)", cache_dir, exc)
