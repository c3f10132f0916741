"""The rows as a table, written as they come: csv, jsonl or parquet, to stdout or a file that
appears only when complete.

A file is written as `tfyard.replace` writes every output: unnamed where the file system
allows, named only when complete, the previous file kept until then; so a predict that fails
or is killed, SIGKILL included, leaves the previous file (or none) and no temporary one.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import sys

from tfyard.errors import UserError
from tfyard.predict.rows import LIST_COLUMNS, arrow_schema
from tfyard.replace import replacing_file

FORMATS = ("csv", "jsonl", "parquet")
PARQUET_ROWS = 1024   # per row group: memory stays flat however many rows


def format_of(output: str | None, fmt: str | None) -> str:
    """The table format: as given, else by the output file's extension, else csv."""
    if fmt is None:
        extension = os.path.splitext(output or "")[1].lstrip(".").lower()
        fmt = {"json": "jsonl", "pq": "parquet"}.get(extension, extension)
        fmt = fmt if fmt in FORMATS else "csv"
    if fmt not in FORMATS:
        raise UserError(f"unknown --format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        if output is None:
            raise UserError("--format parquet needs --output FILE (parquet is not streamed "
                            "to standard output)")
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UserError("--format parquet needs pyarrow: pip install 'tfyard[parquet]' "
                            "(or use --format csv or jsonl)") from None
    return fmt


class _Streamed:
    """A text format whose rows go straight to the stream: nothing held to close or drop."""

    def close(self) -> None:
        pass

    def discard(self) -> None:
        pass


class _Csv(_Streamed):
    def __init__(self, stream, columns):
        self.writer = csv.DictWriter(stream, columns)
        self.writer.writeheader()

    def write(self, row: dict) -> None:
        self.writer.writerow({k: json.dumps(v) if k in LIST_COLUMNS else
                              ("" if v is None else v) for k, v in row.items()})


class _Jsonl(_Streamed):
    def __init__(self, stream, columns):
        self.stream = stream

    def write(self, row: dict) -> None:
        self.stream.write(json.dumps(row) + "\n")


class _Parquet:
    def __init__(self, stream, columns):
        import pyarrow.parquet as pq

        self.schema = arrow_schema(columns)
        self.writer = pq.ParquetWriter(stream, self.schema)
        self.rows: list[dict] = []

    def write(self, row: dict) -> None:
        self.rows.append(row)
        if len(self.rows) >= PARQUET_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self.rows:
            self.writer.write_table(pa.Table.from_pylist(self.rows, self.schema))
            self.rows = []

    def close(self) -> None:
        self._flush()
        self.writer.close()

    def discard(self) -> None:
        """Close without the rows held: else pyarrow's own `__del__` closes it later, into
        the stream already closed ("write to closed file")."""
        self.rows = []
        with contextlib.suppress(Exception):   # the error that stopped it is the news
            self.writer.close()


WRITERS = {"csv": _Csv, "jsonl": _Jsonl, "parquet": _Parquet}


@contextlib.contextmanager
def table(output: str | None, fmt: str, columns):
    """A writer (`write(row)`) of `fmt` to `output`, or to stdout when None; the file gets
    its name only if the block ends without an error."""
    if output is None:
        with _closed(WRITERS[fmt](sys.stdout, columns)) as writer:
            yield writer
        sys.stdout.flush()
        return
    with replacing_file(output, "wb" if fmt == "parquet" else "w") as stream, \
            _closed(WRITERS[fmt](stream, columns)) as writer:
        yield writer


@contextlib.contextmanager
def _closed(writer):
    """`writer`, closed once: completed when the block ends well, else discarded (before
    its stream closes)."""
    try:
        yield writer
    except BaseException:
        writer.discard()
        raise
    writer.close()
