"""Keras imports scikit-learn, matplotlib.pyplot and pandas at start-up, only for its sklearn
wrappers, its image-gallery plot and `fit`/`predict` on DataFrames, none of which tfyard
uses: ~2-3 s of the ~8 s every TensorFlow process of `tfyard` spends importing on a 2-core
machine (pandas alone ~0.3 s). Likewise TensorBoard's TensorFlow stand-in (which
`tf.summary` loads) imports boto3 and fsspec to read `s3://` and other remote logs when
TensorFlow is absent, which tfyard never asks of it (~0.3 s); and TensorFlow's own legacy
Keras (tf.compat.v1's, which `import tensorflow` loads) imports scipy.sparse only to accept
SciPy matrices in its v1 `fit`, which nothing of tfyard calls (~0.3 s a process).

`skip_optional_imports()` (the CLI calls it) makes those imports fail while `keras` or that
stand-in is itself being imported, as if they were not installed, which each handles by
leaving those helpers off. Once they are loaded the modules import normally (`tfyard plot`,
Spark's pandas batches and the bucket layer need them). Library users who import Keras first
are not affected.
"""

from __future__ import annotations

import sys

# importer -> the imports it makes only for what tfyard never uses
OPTIONAL = {"keras": frozenset({"sklearn", "matplotlib", "pandas"}),
            "tensorboard.compat.tensorflow_stub.io.gfile": frozenset({"boto3", "fsspec"}),
            # TensorFlow's own legacy Keras (tf.compat.v1's), which `import tensorflow`
            # loads; scipy is no TensorFlow dependency, so each of its imports is guarded
            "tensorflow": frozenset({"scipy"})}


def _importing(module: str) -> bool:
    """True while `module` itself runs (CPython marks a module's spec `_initializing` then;
    without that mark nothing is skipped, so the worst case is a slower start)."""
    spec = getattr(sys.modules.get(module), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


class _SkipWhileImporting:
    """A `sys.meta_path` finder (duck-typed: importing importlib.abc costs `--help` 30 ms)."""

    def find_spec(self, name, path=None, target=None):
        for importer, names in OPTIONAL.items():
            if name in names and _importing(importer):
                raise ModuleNotFoundError(f"{name} is not loaded while {importer} starts "
                                          "(tfyard)", name=name)
        return None  # not ours: the next finder looks


def skip_optional_imports() -> None:
    if not any(isinstance(f, _SkipWhileImporting) for f in sys.meta_path):
        sys.meta_path.insert(0, _SkipWhileImporting())
