#!/usr/bin/env python3
"""ResNet on CIFAR-10 binaries on Spark, TensorFlowOnSpark style, with the classic command line.

    spark-submit --master spark://host:7077 resnet_cifar_spark.py --cluster_size 2 --epochs 1 \\
        --data_dir cifar-10-batches-bin --num_gpus=0 --ds=multi_worker_mirrored --train_epochs 1

`--cluster_size` executors become ps (`--num_ps`), then the chief, then workers; every other
flag goes to `tfyard train` on each of them. Relative paths are taken from where
spark-submit ran.
"""

import argparse
import sys

from pyspark import SparkConf, SparkContext
from resnet_cifar_main import classic_cifar_argv

import tfyard.spark
from tfyard import platform

PATH_FLAGS = ("--data_dir", "--data-dir", "--output_dir", "--output-dir")


def absolute_paths(argv, ctx):
    """The training flags with every path made absolute (executors run elsewhere)."""
    out, path_next = [], False
    for arg in argv:
        flag, sep, value = arg.partition("=")
        if path_next:
            arg = ctx.absolute_path(arg)
        elif sep and flag in PATH_FLAGS:
            arg = f"{flag}={ctx.absolute_path(value)}"
        path_next = not sep and arg in PATH_FLAGS
        out.append(arg)
    if not any(a.partition("=")[0] in ("--output_dir", "--output-dir") for a in argv):
        out += ["--output_dir", ctx.absolute_path("output")]
    return out


def main_fun(argv, ctx):
    from tfyard.train import run

    print(f"executor {ctx.executor_id}: {ctx.job_name}:{ctx.task_index} of "
          f"{ctx.num_workers} worker(s)", flush=True)
    sys.exit(run(absolute_paths(argv, ctx)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster_size", type=int, required=True, help="executors to use")
    parser.add_argument("--num_ps", type=int, default=0, help="parameter servers among them")
    parser.add_argument("--tensorboard", action="store_true", help="start TensorBoard on the chief")
    platform.add_platform_flag(parser, "log_dir", help="what TensorBoard shows")
    args, rest = parser.parse_known_args()
    sc = SparkContext(conf=SparkConf().setAppName("resnet_cifar_spark")
                      .set("spark.dynamicAllocation.enabled", "false"))
    try:
        tfyard.spark.run(sc, main_fun, classic_cifar_argv(rest), args.cluster_size,
                         args.num_ps, args.tensorboard, args.log_dir)
    except tfyard.spark.MemberFailed as exc:
        print(f"resnet_cifar_spark: {exc}", file=sys.stderr)
        sys.exit(1)
    finally:
        sc.stop()
