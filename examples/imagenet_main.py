#!/usr/bin/env python3
"""ResNet on ImageNet TFRecords, with the classic command line.

    imagenet_main.py --data_dir=/data/imagenet --train-batch-size=256 --resnet_size=101

One GPU, several GPUs (Mirrored) or a cluster from TF_CONFIG (the legacy `master` form
included): the strategy follows the role, the script does not change.

`--model_dir` is the output directory, as in the official ResNet. Fine-tuning as it did:
`--pretrained_model_checkpoint_path` loads every weight but the final dense layer's,
`--fine_tune` trains only that layer.
"""

import sys

from tfyard.cli import main
from tfyard.flags import absl_booleans, rename_flags

PRETRAINED = "--pretrained_model_checkpoint_path"
RESNET_FLAGS = {"--model_dir": "--output_dir", PRETRAINED: "--init_checkpoint"}

if __name__ == "__main__":
    argv = absl_booleans(sys.argv[1:], ("--fine_tune",))
    if any(arg.partition("=")[0] == PRETRAINED for arg in argv):
        argv.append("--init_fresh_head")   # everything but the final dense layer
    argv = rename_flags(argv, RESNET_FLAGS)
    sys.exit(main(["train", "--dataset", "imagenet", *argv]))
