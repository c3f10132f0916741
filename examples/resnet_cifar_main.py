#!/usr/bin/env python3
"""ResNet on CIFAR-10 binaries, with the classic command line.

    resnet_cifar_main.py --data_dir=cifar-10-batches-bin --num_gpus=0 --train_epochs=1 \\
        --ds=multi_worker_mirrored

`--resnet_size=N` picks the CIFAR ResNet-N (default 56, He et al. 2016).
"""

import sys

from tfyard.cli import main

MODEL_FLAGS = ("--model", "--resnet_size", "--model_name")


def classic_cifar_argv(argv: list[str]) -> list[str]:
    """`tfyard train` flags for the classic script: CIFAR-10 and ResNet-56 unless named."""
    defaults = ["--dataset", "cifar10"]
    if not any(a.split("=")[0] in MODEL_FLAGS for a in argv):
        defaults += ["--resnet_size", "56"]
    return [*defaults, *argv]


if __name__ == "__main__":
    sys.exit(main(["train", *classic_cifar_argv(sys.argv[1:])]))
