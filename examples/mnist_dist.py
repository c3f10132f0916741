#!/usr/bin/env python3
"""Distributed MNIST. The cluster comes from TF_CONFIG, or from the TF 1 flags
`--ps_hosts --worker_hosts --job_name --task_index` (worker 0 becomes the chief).

    TF_CONFIG='{"cluster": {"worker": ["h1:2222", "h2:2222"]}, "task": ...}' mnist_dist.py ...
    mnist_dist.py --ps_hosts=h0:2222 --worker_hosts=h1:2222,h2:2222 --job_name=worker \\
        --task_index=0 --data_dir=/data/mnist
"""

import argparse
import json
import os
import sys

from mnist import main

from tfyard.distribute.cluster import tf_config_from_legacy_flags
from tfyard.errors import UserError

if __name__ == "__main__":
    legacy = argparse.ArgumentParser(add_help=False)
    for flag in ("--ps_hosts", "--worker_hosts", "--job_name"):
        legacy.add_argument(flag, default=None)
    legacy.add_argument("--task_index", type=int, default=0)
    flags, rest = legacy.parse_known_args(sys.argv[1:])
    if flags.worker_hosts:
        try:
            os.environ["TF_CONFIG"] = json.dumps(tf_config_from_legacy_flags(
                flags.ps_hosts, flags.worker_hosts, flags.job_name, flags.task_index))
        except UserError as exc:
            print(f"tfyard: error: {exc}", file=sys.stderr)
            sys.exit(2)
    sys.exit(main(rest))
