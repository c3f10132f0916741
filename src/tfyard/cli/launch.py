"""`tfyard launch local|spark -- COMMAND...`: run COMMAND once per cluster member."""

from __future__ import annotations

import argparse
import sys

_LOCAL_EPILOG = """Each member runs COMMAND with its own TF_CONFIG on 127.0.0.1; output lines are
prefixed with the member ([worker:1]). Example:
  tfyard launch local --workers 2 -- tfyard train --model cifar_resnet20 --dataset digits"""

_SPARK_EPILOG = """One Spark barrier stage of N tasks, ps first, then the chief, workers and the
evaluator (as TensorFlowOnSpark did). Example:
  tfyard launch spark --master spark://host:7077 --num_executors 3 --num_ps 1 -- tfyard train"""


def register(commands) -> None:
    launch = commands.add_parser("launch", help="run a training command as a whole cluster")
    sub = launch.add_subparsers(dest="launch_command", metavar="SUBCOMMAND",
                                parser_class=type(launch))
    local = sub.add_parser("local", help="start every member as a process on this machine",
                           epilog=_LOCAL_EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    local.add_argument("--workers", type=int, required=True, help="number of worker tasks")
    local.add_argument("--chief", action="store_true", help="add a chief task")
    local.add_argument("--ps", type=int, default=0, help="number of parameter-server tasks")
    local.add_argument("--evaluator", action="store_true", help="add an evaluator side-car")
    local.add_argument("--max_restarts", "--max-restarts", type=int, default=0,
                       help="restart the whole job up to K times when a member fails")
    local.add_argument("--grace", type=float, default=10.0,
                       help="seconds members get to exit after the chief is done or on stop")
    local.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    local.set_defaults(func=launch_local)

    spark = sub.add_parser("spark", help="run every member as a task of a Spark barrier stage",
                           epilog=_SPARK_EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    spark.add_argument("--master", required=True, help="Spark master URL (local[N], spark://...)")
    spark.add_argument("--num_executors", "--num-executors", type=int, required=True,
                       help="cluster members, one Spark task each (ps + chief + workers)")
    spark.add_argument("--num_ps", "--num-ps", type=int, default=0, help="parameter servers")
    spark.add_argument("--evaluator", action="store_true",
                       help="make the last task an evaluator side-car")
    spark.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="extra Spark configuration, repeatable")
    spark.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    spark.set_defaults(func=launch_spark)
    launch.set_defaults(func=lambda args: launch.print_help() or 2)


def _command(args) -> list[str]:
    return args.command[1:] if args.command[:1] == ["--"] else args.command


def launch_local(args) -> int:
    from tfyard.launch.local import run_local

    outcome = run_local(_command(args), args.workers, args.chief, args.ps, args.evaluator,
                        args.max_restarts, args.grace)
    if outcome.returncode:
        print(f"tfyard: launch failed: {outcome.message}", file=sys.stderr)
    return outcome.returncode


def launch_spark(args) -> int:
    from tfyard.launch.spark import MemberFailed, run_command, spark_context

    with spark_context(args.master, args.conf) as sc:
        try:
            run_command(sc, _command(args), args.num_executors, args.num_ps, args.evaluator)
        except MemberFailed as exc:
            print(f"tfyard: launch failed: {exc}", file=sys.stderr)
            return 1
    return 0
