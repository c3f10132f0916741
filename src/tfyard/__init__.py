"""tfyard: one TensorFlow image-classification program at every scale.

`tfyard.fit(model, data, **options)` trains your own Keras model (see `tfyard.train.fit`);
it loads TensorFlow on first use, so `import tfyard` stays instant.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "fit":
        from tfyard.train.fit import fit

        return fit
    raise AttributeError(f"module 'tfyard' has no attribute {name!r}")
