#!/usr/bin/env python3
"""ResNet on CIFAR-10 binaries, with the classic command line.

    resnet_cifar_main.py --data_dir=cifar-10-batches-bin --num_gpus=0 --train_epochs=1 \\
        --ds=multi_worker_mirrored

`--resnet_size=N` picks the CIFAR ResNet-N (default 56, He et al. 2016).
"""

import sys

from tfyard.cli import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    defaults = ["--dataset", "cifar10"]
    if not any(a.split("=")[0] in ("--model", "--resnet_size", "--model_name") for a in argv):
        defaults += ["--resnet_size", "56"]
    sys.exit(main(["train", *defaults, *argv]))
