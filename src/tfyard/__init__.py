"""tfyard: one TensorFlow image-classification program at every scale.

`tfyard.fit(model, data, **options)` trains your own Keras model (see `tfyard.train.fit`);
`tfyard.predict(run, inputs, top_k=5)` predicts with a trained one (see `tfyard.predict`);
`tfyard.tune(model, data, space=..., metric=..., ...)` searches train's options (see
`tfyard.tune`). Each loads TensorFlow (or Optuna) on first use, so `import tfyard` stays
instant.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "fit":
        from tfyard.train.fit import fit

        return fit
    if name in ("predict", "tune"):
        import importlib  # the package is callable: tfyard.predict(run, inputs, ...)

        return importlib.import_module(f"tfyard.{name}")
    raise AttributeError(f"module 'tfyard' has no attribute {name!r}")


def callable_package(name: str, function) -> None:
    """Make the imported package `name` callable as `function`. Importing `tfyard.predict`
    sets the attribute `tfyard.predict` to the package, so the package itself must be the
    function for `tfyard.predict(...)` to work whether or not it was imported first."""
    import sys
    import types

    class CallablePackage(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return function(*args, **kwargs)

    sys.modules[name].__class__ = CallablePackage
