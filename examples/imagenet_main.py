#!/usr/bin/env python3
"""ResNet on ImageNet TFRecords, with the classic command line.

    imagenet_main.py --data_dir=/data/imagenet --train-batch-size=256 --resnet_size=101

One GPU, several GPUs (Mirrored) or a cluster from TF_CONFIG (the legacy `master` form
included): the strategy follows the role, the script does not change.
"""

import sys

from tfyard.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", "--dataset", "imagenet", *sys.argv[1:]]))
