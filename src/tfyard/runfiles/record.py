"""run.json, read and written one way. Every change to it (train's record at each start,
MLflow's run id, a tune trial's child run, a PBT handover's new start) is one `amend_run`, in
one format (one JSON object, indented, keys sorted), so a run on disk and a run in a bucket
with its local copy are changed by the same call."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from tfyard.errors import disk_error
from tfyard.runfiles.layout import RunDirectory

log = logging.getLogger("tfyard")


def parse_json_lines(text: str, where: str) -> list[dict]:
    """The JSON objects of a JSON-lines file's text (`metrics.jsonl`); lines that do not
    parse (torn by a kill) are skipped with one warning (`where` names the file). A whole
    JSON file reads as one object."""
    records, torn = [], []
    try:
        whole = json.loads(text)
        return [whole] if isinstance(whole, dict) else []
    except ValueError:
        pass
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            torn.append(number)
    if torn:
        log.warning(f"tfyard: warning: {where}: skipped {len(torn)} torn line(s) (line "
                    f"{', '.join(map(str, torn[:5]))}), left by a process killed mid-write")
    return records


def _last(text: str, where: str) -> dict | None:
    records = parse_json_lines(text, where)
    return records[-1] if records else None


def read_run(output_dir: str) -> dict | None:
    """run.json of `output_dir`: None if there is none, or if it cannot be read (a warning)."""
    run = RunDirectory(output_dir)
    if not run.files.has(run.run_file):
        return None
    return _last(run.files.read_whole(run.run_file), run.run_file)


def amend_run(copy: str, amend: Callable[[dict | None], dict | None],
              url: str | None = None) -> None:
    """Rewrite run.json of the run whose files are in `copy` whole, as `amend(its record,
    None when there is none)` returns it (None: leave it). With `url`, the run's prefix in a
    bucket (`copy` its local copy): the bucket's run.json is amended, written only over the
    version read (`BucketFiles.amend`), and the copy then holds what the bucket holds, so
    it continues the bucket. A UserError when the bucket would not take it."""
    run, held = RunDirectory((url or copy).rstrip("/")), {}

    def amended(body: bytes | None) -> bytes | None:
        before = _last(body.decode("utf-8", "replace"), run.run_file) if body else None
        record = amend(before)
        held["record"] = before if record is None else record
        return None if record is None else _text(record).encode()

    _amend(run, amended)
    if url and held.get("record") is not None:   # the copy continues the bucket
        _amend(RunDirectory(copy), lambda _: _text(held["record"]).encode())


def _text(record: dict) -> str:
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def _amend(run: RunDirectory, amended: Callable[[bytes | None], bytes | None]) -> None:
    run.files.make_directory(run.root)
    try:
        run.files.amend(run.run_file, amended)
    except run.files.failures() as exc:   # TensorFlow's errors only where TensorFlow wrote
        raise disk_error(exc, f"write {run.run_file}") or exc from None
