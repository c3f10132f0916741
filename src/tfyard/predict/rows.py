"""A prediction row, defined once: its columns, their Arrow types (parquet, and the batches
Spark and Ray score) and the dicts the Predictor gives, so every engine and format writes the
same table."""

from __future__ import annotations

COLUMNS = ("path", "class_id", "class_name", "score", "top_ids", "top_names", "top_scores",
           "error")
LIST_COLUMNS = ("top_ids", "top_names", "top_scores")


def arrow_schema(columns=None):
    """The Arrow types of the row columns (all, in order, when None)."""
    import pyarrow as pa

    types = {"path": pa.string(), "class_id": pa.int64(), "class_name": pa.string(),
             "score": pa.float32(), "top_ids": pa.list_(pa.int64()),
             "top_names": pa.list_(pa.string()), "top_scores": pa.list_(pa.float32()),
             "error": pa.string()}
    return pa.schema([(name, types[name]) for name in columns or COLUMNS])


def scored(path, ids: list[int], names: list[str], scores: list[float]) -> dict:
    """The row of an image that was scored: its top classes, best first."""
    return {"path": path, "class_id": ids[0], "class_name": names[0], "score": scores[0],
            "top_ids": ids, "top_names": names, "top_scores": scores, "error": ""}


def failed(path, error: str) -> dict:
    """The row of an item that could not be scored, saying why."""
    return {"path": path, "class_id": None, "class_name": None, "score": None,
            "top_ids": [], "top_names": [], "top_scores": [], "error": error}
