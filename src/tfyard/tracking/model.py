"""A tfyard export as an MLflow model (the pyfunc flavour):
`mlflow.pyfunc.load_model(uri).predict(images)` scores encoded images (JPEG, PNG, ... bytes)
through tfyard's own Predictor, with the run's preprocessing and class names, and returns
`tfyard predict`'s rows as a table. Only the SavedModel travels; loading it runs none of the
training code, and this module is imported only to log or load such a model."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from importlib.metadata import version

import mlflow.pyfunc
import pandas as pd

from tfyard.tracking import Settings

ARTIFACT = "saved_model"
NAME = "model"


class ImageClassifier(mlflow.pyfunc.PythonModel):
    """The pyfunc face of an export: images in, predict's rows out."""

    def load_context(self, context) -> None:
        from tfyard.predict.predictor import Predictor

        self._predictor = Predictor(context.artifacts[ARTIFACT])

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        """One row for each image: a table's first column, a list, or one image's bytes
        (the hint names the table, so MLflow passes any of them on unchanged)."""
        rows = self._predictor.rows((None, image) for image in _images(model_input))
        return pd.DataFrame([{k: v for k, v in row.items() if k != "path"} for row in rows])


def _images(model_input) -> list:
    """The encoded images pyfunc hands over: a table's first column, a series, a list, or
    one image's bytes."""
    if isinstance(model_input, bytes | bytearray):
        return [bytes(model_input)]
    if hasattr(model_input, "columns"):
        return list(model_input.iloc[:, 0])
    return list(model_input)


def log(settings: Settings, run_id: str, export: str) -> str:
    """Log the SavedModel of `export` as the MLflow run's model, registered under
    `settings.register_model` when given; what was done, in words."""
    # MLflow logs a model only through its process-wide tracking URI; this switch restores
    # the caller's own setting (or its absence) afterwards.
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    from tfyard.predict.local import locate

    with _use_tracking_uri(settings.uri), _quiet(), mlflow.start_run(
            run_id=run_id, nested=mlflow.active_run() is not None):
        info = mlflow.pyfunc.log_model(
            name=NAME, python_model=ImageClassifier(), artifacts={ARTIFACT: locate(export)},
            pip_requirements=[f"tfyard=={version('tfyard')}"],
            registered_model_name=settings.register_model)
    registered = (f", registered as {settings.register_model} version "
                  f"{info.registered_model_version}" if settings.register_model else "")
    return f"logged the model to MLflow ({info.model_uri}{registered})"


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
