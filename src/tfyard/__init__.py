"""tfyard: one TensorFlow image-classification program at every scale."""

__version__ = "0.1.0"
