"""Keras imports scikit-learn, matplotlib.pyplot and pandas at start-up, only for its sklearn
wrappers, its image-gallery plot and `fit`/`predict` on DataFrames, none of which tfyard
uses: ~2-3 s of the ~8 s every TensorFlow process of `tfyard` spends importing on a 2-core
machine (pandas alone ~0.3 s).

`skip_optional_imports()` (the CLI calls it) makes those imports fail while `keras` itself
is being imported, as if they were not installed, which Keras handles by leaving those
helpers off. Once Keras is loaded they import normally (`tfyard plot`
and Spark's pandas batches need them). Library users who import Keras first are not
affected.
"""

from __future__ import annotations

import sys

KERAS_OPTIONAL = frozenset({"sklearn", "matplotlib", "pandas"})


def _keras_importing() -> bool:
    """True while `keras/__init__.py` runs (CPython marks a module's spec `_initializing`
    then; without that mark nothing is skipped, so the worst case is a slower start)."""
    spec = getattr(sys.modules.get("keras"), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


class _SkipWhileKerasImports:
    """A `sys.meta_path` finder (duck-typed: importing importlib.abc costs `--help` 30 ms)."""

    def find_spec(self, name, path=None, target=None):
        if name in KERAS_OPTIONAL and _keras_importing():
            raise ModuleNotFoundError(f"{name} is not loaded while Keras starts (tfyard)",
                                      name=name)
        return None  # not ours: the next finder looks


def skip_optional_imports() -> None:
    if not any(isinstance(f, _SkipWhileKerasImports) for f in sys.meta_path):
        sys.meta_path.insert(0, _SkipWhileKerasImports())
