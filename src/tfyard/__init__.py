"""tfyard: one TensorFlow image-classification program at every scale.

`tfyard.fit(model, data, **options)` trains your own Keras model (see `tfyard.train.fit`);
`tfyard.predict(run, inputs, top_k=5)` predicts with a trained one (see `tfyard.predict`).
Both load TensorFlow on first use, so `import tfyard` stays instant.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "fit":
        from tfyard.train.fit import fit

        return fit
    if name == "predict":
        import importlib  # the package is callable: tfyard.predict(run, inputs, ...)

        return importlib.import_module("tfyard.predict")
    raise AttributeError(f"module 'tfyard' has no attribute {name!r}")
