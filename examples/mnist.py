#!/usr/bin/env python3
"""MNIST with the TensorFlow tutorial's model, built and compiled here and handed to tfyard
(`--model mnist.py:build`), as `model_to_estimator` once took it; the trained model is saved
as `<output_dir>/mnist.h5`.

    mnist.py --data_dir=/data/mnist --output_dir=/out      # reads mnist.npz or the IDX .gz files
"""

import argparse
import shutil
import sys
from pathlib import Path

from tfyard import platform
from tfyard.cli import main as tfyard
from tfyard.distribute.cluster import load_cluster_config


def build(input_shape=(28, 28, 1), num_classes=10):
    """The "TensorFlow 2 quickstart for beginners" model, compiled as the tutorial does.
    (Keras is imported here, after tfyard has quietened TensorFlow's C++ log lines.)"""
    import keras

    model = keras.Sequential([
        keras.Input(input_shape),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(num_classes),
    ])
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def main(argv: list[str]) -> int:
    model = f"{Path(__file__).resolve()}:build"   # every cluster member imports this file
    status = tfyard(["train", "--dataset", "mnist", "--model", model, *argv])
    if status or not load_cluster_config().is_coordinator:
        return status  # only the member that wrote the export copies it and says so
    parser = platform.add_platform_arguments(argparse.ArgumentParser(add_help=False))
    output_dir = Path(platform.from_args(parser.parse_known_args(argv)[0], create=False)
                      .output_dir)
    exported = output_dir / "export" / "model.h5"
    if exported.exists():
        shutil.copyfile(exported, output_dir / "mnist.h5")
        print(f"mnist: model saved to {output_dir / 'mnist.h5'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
