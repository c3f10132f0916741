"""The trained model in use: one predictor (`predictor.py`), called from files on this machine
(`local.py`: `tfyard predict`, `tfyard.predict`) and, in the SavedModel, by image bytes
(`signature.py`: `serving_default`, what TF Serving answers).

`tfyard.predict` is both this package and the function: calling it calls `predict`, so
`tfyard.predict("out", ["photos/"])` works whether or not the package was imported first.
Importing it loads no TensorFlow.
"""

from __future__ import annotations

from tfyard import callable_package

__all__ = ["predict"]


def predict(run, inputs, top_k: int = 5, **options) -> list[dict]:
    """The predictions of `run`'s model (a run directory, its export/ or a SavedModel) for
    `inputs` (a path, a glob, or a list of paths, folders, globs and encoded images as bytes):
    one dict per item, in order, with path, class_id, class_name, score, the top_k ids, names
    and scores, and error ('' when the image was read; an item that is no image, None or a
    missing file say, gets its row with the error). options: batch_size (32), on_error
    ('skip', or 'fail': a UserError at the first unreadable item)."""
    from tfyard.predict.local import predict_rows

    return predict_rows(run, inputs, top_k, **options)


callable_package(__name__, predict)
