#!/usr/bin/env python3
"""The TF-Slim trainer's command line on tfyard.

    train_image_classifier.py --model_name=vgg_19 --batch_size=64 \\
        --dataset_dir=/data/flowers --train_dir=/out --num_clones=2

Reads slim-style TFRecords (`*.tfrecord` + labels.txt). `--num_clones` (or `--num_gpus`)
replicates over GPUs; with ps tasks in TF_CONFIG it trains asynchronously through the
parameter servers, as slim's replicas did.
"""

import sys

from tfyard.cli import main
from tfyard.flags import rename_flags

SLIM_FLAGS = {
    "--dataset_dir": "--data_dir",
    "--train_dir": "--output_dir",
    "--num_clones": "--num_gpus",
    "--max_number_of_steps": "--train_steps",
}

if __name__ == "__main__":
    argv = rename_flags(sys.argv[1:], SLIM_FLAGS)
    sys.exit(main(["train", "--dataset", "tfrecord", *argv]))
