#!/usr/bin/env python3
"""The TF-Slim trainer's command line on tfyard.

    train_image_classifier.py --model_name=vgg_19 --batch_size=64 \\
        --dataset_dir=/data/flowers --train_dir=/out --num_clones=2

Reads slim-style TFRecords (`*.tfrecord` + labels.txt). `--num_clones` (or `--num_gpus`)
replicates over GPUs; with ps tasks in TF_CONFIG it trains asynchronously through the
parameter servers, as slim's replicas did.

Fine-tuning as slim's README does it: `--checkpoint_path` (a weights file, a checkpoint, or
a directory meaning its newest checkpoint), `--checkpoint_exclude_scopes` (layers not
loaded), `--trainable_scopes` (only these train) and `--ignore_missing_vars`, with layer
names in place of slim's variable scopes.
"""

import sys

from tfyard.cli import main
from tfyard.flags import absl_booleans, rename_flags

SLIM_FLAGS = {
    "--dataset_dir": "--data_dir",
    "--train_dir": "--output_dir",
    "--num_clones": "--num_gpus",
    "--max_number_of_steps": "--train_steps",
    "--checkpoint_path": "--init_checkpoint",
    "--checkpoint_exclude_scopes": "--init_exclude",
    "--trainable_scopes": "--trainable",
    "--ignore_missing_vars": "--init_allow_missing",
}

if __name__ == "__main__":
    argv = rename_flags(absl_booleans(sys.argv[1:], ("--ignore_missing_vars",)), SLIM_FLAGS)
    sys.exit(main(["train", "--dataset", "tfrecord", *argv]))
