"""`tfyard cluster show`: the parsed cluster, this task's role and the chosen strategy."""

from __future__ import annotations

import argparse
import json
import os

from tfyard import platform
from tfyard.distribute import strategy
from tfyard.distribute.cluster import load_cluster_config, mask_secrets
from tfyard.train.options import add_option_arguments

# Environment variables that shape a training process, shown (secrets masked) by `show`.
_ENV_PREFIXES = ("TF_", "TFYARD_", "CUDA_", "SPARK_", "PYSPARK_", "JOB_COMPLETION_INDEX")
# Terraform's own TF_ variables (developer.hashicorp.com/terraform/cli/config/
# environment-variables), which share the prefix but mean nothing to TensorFlow.
_TERRAFORM = ("TF_CLI_", "TF_VAR_", "TF_LOG", "TF_INPUT", "TF_WORKSPACE", "TF_IN_AUTOMATION",
              "TF_REGISTRY_", "TF_PLUGIN_CACHE_", "TF_DATA_DIR", "TF_IGNORE", "TF_TOKEN_",
              "TF_STATE_PERSIST_INTERVAL", "TF_APPEND_USER_AGENT", "TF_REATTACH_PROVIDERS")

_EPILOG = """TF_CONFIG is read from the environment or from the file named by TF_CONFIG_FILE:
  {"cluster": {"chief": ["host:2222"], "worker": ["host:2223"], "ps": ["host:2224"]},
   "task": {"type": "worker", "index": 0}}
The legacy job name "master" is accepted and shown as "chief"."""


def register(commands) -> None:
    cluster = commands.add_parser("cluster", help="inspect the cluster described by TF_CONFIG")
    sub = cluster.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND",
                                 parser_class=type(cluster))
    show = sub.add_parser(
        "show",
        help="print the translated cluster, this task's role and its strategy",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("--json", action="store_true", help="print one JSON object")
    platform.add_platform_flag(show, "num_gpus")
    add_option_arguments(show, ["ds"], grouped=False)
    show.set_defaults(func=show_cluster)
    cluster.set_defaults(func=lambda args: cluster.print_help() or 2)


def show_cluster(args) -> int:
    config = load_cluster_config()
    gpus = platform.resolve(num_gpus=args.num_gpus, create=False).num_gpus
    plan = strategy.choose(config, gpus, args.ds)
    report = {
        "tf_config": config.to_tf_config(),
        "role": config.role,
        "task_index": config.task_index,
        "is_coordinator": config.is_coordinator,
        "num_gpus": gpus,
        "behaviour": plan.behaviour,
        "strategy": plan.strategy,
        "reason": plan.reason,
        "environment": mask_secrets({k: v for k, v in sorted(os.environ.items())
                                     if k.startswith(_ENV_PREFIXES)
                                     and not k.startswith(_TERRAFORM)}),
    }
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    if config.jobs:
        print("cluster:")
        for job, addresses in config.jobs.items():
            print(f"  {job:<10} {', '.join(addresses)}")
    else:
        print("cluster:    none (single process)")
    print(f"role:       {config.role}" + (f":{config.task_index}" if config.jobs else ""))
    print(f"coordinator: {'yes' if config.is_coordinator else 'no'}")
    print(f"num_gpus:   {gpus}")
    print(f"behaviour:  {plan.behaviour}")
    print(f"strategy:   {plan.strategy} ({plan.reason})")
    if report["environment"]:
        print("environment:")
        for name, value in report["environment"].items():
            print(f"  {name}={value}")
    return 0
