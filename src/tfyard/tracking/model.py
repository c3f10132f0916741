"""A tfyard export as an MLflow model (the pyfunc flavour):
`mlflow.pyfunc.load_model(uri).predict(images)` scores encoded images (JPEG, PNG, ... bytes,
or base64 text of them, as REST clients send images) through tfyard's own Predictor, with the
run's preprocessing and class names, and returns `tfyard predict`'s rows as a table. It takes
image bytes only (`images.image_bytes`): a string is never opened as a path or a URL. Only the
SavedModel travels; loading it runs none of the training code, and this module is imported
only to log or load such a model. Models logged before the signature load as they did: the
class keeps its name and its place."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from importlib.metadata import version

import mlflow.pyfunc
import pandas as pd

from tfyard.predict.rows import COLUMNS, LIST_COLUMNS, failed
from tfyard.tracking import URI_ENV, Settings, environ_set
from tfyard.tracking.images import image_bytes

ARTIFACT = "saved_model"
NAME = "model"
OUTPUT = tuple(name for name in COLUMNS if name != "path")


class ImageClassifier(mlflow.pyfunc.PythonModel):
    """The pyfunc face of an export: images in, predict's rows out."""

    def load_context(self, context) -> None:
        from tfyard import quiet

        # TensorFlow's C++ lines at its import, its first device use and its first input
        # pipeline: all in the load, with the first (blank) image scored
        with quiet.hushed():
            from tfyard.predict.predictor import Predictor

            self._predictor = Predictor(context.artifacts[ARTIFACT])
            list(self._predictor.rows([(None, _blank())]))

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        """One row for each image: a table's first column, a list, or one image's bytes (the
        hint names the table, so MLflow passes any of them on unchanged); an item that is no
        image's bytes gets a row with its `error`, and is never read."""
        taken = [image_bytes(item) for item in _images(model_input)]
        scored = iter(self._predictor.rows((None, data) for data, problem in taken
                                           if problem is None))
        rows = [next(scored) if problem is None else failed(None, problem)
                for _, problem in taken]
        # object columns: a row that failed has null class_id and score, never NaN
        return pd.DataFrame([[row[name] for name in OUTPUT] for row in rows],
                            columns=list(OUTPUT), dtype=object)


def _blank() -> bytes:
    """A small black PNG."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8)).save(out, format="PNG")
    return out.getvalue()


def _images(model_input) -> list:
    """The items pyfunc hands over: a table's first column, a series, a list, or one
    image's bytes (or base64 text)."""
    if isinstance(model_input, bytes | bytearray | str):
        return [model_input]
    if hasattr(model_input, "columns"):
        return list(model_input.iloc[:, 0])
    return list(model_input)


def signature():
    """Image bytes in (base64 text over REST), the prediction table out."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Array, ColSpec, DataType, Schema

    types = {"class_id": DataType.long, "class_name": DataType.string,
             "score": DataType.float, "top_ids": Array(DataType.long),
             "top_names": Array(DataType.string), "top_scores": Array(DataType.float),
             "error": DataType.string}
    return ModelSignature(
        inputs=Schema([ColSpec(DataType.binary)]),   # unnamed: a list, a series, any table
        outputs=Schema([ColSpec(types[name], name, required=name in ("error", *LIST_COLUMNS))
                        for name in OUTPUT]))


def log(settings: Settings, run_id: str, export: str) -> str:
    """Log the SavedModel of `export` as the MLflow run's model, registered under
    `settings.register_model` when given; what was done, in words."""
    from tfyard.predict.local import locate

    with _tracking_uri(settings.uri), _quiet(), mlflow.start_run(
            run_id=run_id, nested=mlflow.active_run() is not None):
        info = mlflow.pyfunc.log_model(
            name=NAME, python_model=ImageClassifier(), artifacts={ARTIFACT: locate(export)},
            pip_requirements=[f"tfyard=={version('tfyard')}"], signature=signature(),
            registered_model_name=settings.register_model)
    registered = (f", registered as {settings.register_model} version "
                  f"{info.registered_model_version}" if settings.register_model else "")
    return f"logged the model to MLflow ({info.model_uri}{registered})"


@contextlib.contextmanager
def _tracking_uri(uri: str):
    """MLflow's process-wide tracking URI set to `uri` for the block (MLflow logs a model
    only through it), then put back exactly: its own value and MLFLOW_TRACKING_URI's, which
    MLflow's `set_tracking_uri` changes too (and `set_tracking_uri(None)` deletes)."""
    from mlflow.tracking._tracking_service import utils

    before, environ = utils._tracking_uri, {URI_ENV: os.environ.get(URI_ENV)}
    utils.set_tracking_uri(uri)
    try:
        yield
    finally:
        utils.set_tracking_uri(before)
        environ_set(environ)


@contextlib.contextmanager
def _quiet():
    """MLflow's own chatter kept off the console (the run's address, registration notes,
    warnings about pickling and type hints): tfyard says what was done in one line."""
    logger = logging.getLogger("mlflow")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
