"""`tfyard launch local|spark|ray -- COMMAND...`: run COMMAND once per cluster member."""

from __future__ import annotations

import argparse
import sys

_LOCAL_EPILOG = """Each member runs COMMAND with its own TF_CONFIG on 127.0.0.1; output lines are
prefixed with the member ([worker:1]). A member exiting 143 (preempted after saving)
restarts the job without spending --max_restarts; one exiting 79 (paused at train's
--pause_at_step) ends it with exit 79; SIGTERM to the launcher reaches every member, which
get --grace_period s to save, then the launcher exits 143. Example:
  tfyard launch local --workers 2 -- tfyard train --model cifar_resnet20 --dataset digits"""

_SPARK_EPILOG = """One Spark barrier stage of N tasks, ps first, then the chief, workers and the
evaluator (as TensorFlowOnSpark did). When Spark retries the stage (spark.task.maxFailures),
the members start again and `tfyard train` resumes from its latest checkpoint. Example:
  tfyard launch spark --master spark://host:7077 --num_executors 3 --num_ps 1 -- tfyard train"""

_RAY_EPILOG = """Members run as Ray actors of one placement group (PACK or SPREAD), each as a child
process with a TF_CONFIG built from the actors' node addresses; supervision is that of
`launch local`. Needs pip install 'tfyard[ray]'. Example:
  tfyard launch ray --address HEAD:6379 --workers 4 --gpus_per_member 1 -- tfyard train"""


def _cluster_flags(parser) -> None:
    parser.add_argument("--workers", type=int, required=True, help="number of worker tasks")
    parser.add_argument("--chief", action="store_true", help="add a chief task")
    parser.add_argument("--ps", type=int, default=0, help="number of parameter-server tasks")
    parser.add_argument("--evaluator", action="store_true", help="add an evaluator side-car")


def _supervision_flags(parser) -> None:
    parser.add_argument("--max_restarts", "--max-restarts", type=int, default=0,
                        help="restart the whole job up to K times when a member fails or "
                        "freezes (preemptions, exit 143, do not count)")
    parser.add_argument("--grace", type=float, default=10.0,
                        help="seconds members get to exit after the chief is done or a failure")
    parser.add_argument("--grace_period", "--grace-period", type=float, default=30.0,
                        help="seconds members get to save and exit when the launcher is "
                        "stopped (SIGTERM, Ctrl-C)")
    parser.add_argument("--hang_timeout", "--hang-timeout", type=float, default=300.0,
                        help="a member whose heartbeat (tfyard train beats every second) is "
                        "older than this is frozen: named, killed, restarted; 0 turns it off")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def _subparser(sub, name: str, help_text: str, epilog: str):
    return sub.add_parser(name, help=help_text, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def register(commands) -> None:
    launch = commands.add_parser("launch", help="run a training command as a whole cluster")
    sub = launch.add_subparsers(dest="launch_command", metavar="SUBCOMMAND",
                                parser_class=type(launch))
    local = _subparser(sub, "local", "start every member as a process on this machine",
                       _LOCAL_EPILOG)
    _cluster_flags(local)
    _supervision_flags(local)
    local.set_defaults(func=launch_local)

    spark = _subparser(sub, "spark", "run every member as a task of a Spark barrier stage",
                       _SPARK_EPILOG)
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

    ray = _subparser(sub, "ray", "run every member as a Ray actor's child process", _RAY_EPILOG)
    ray.add_argument("--address", help="Ray cluster to join (default: RAY_ADDRESS, a Ray "
                     "started on this machine, else a new local one)")
    _cluster_flags(ray)
    ray.add_argument("--cpus_per_member", "--cpus-per-member", type=float, default=1.0,
                     help="CPUs each member's actor reserves")
    ray.add_argument("--gpus_per_member", "--gpus-per-member", type=float, default=0.0,
                     help="GPUs each member's actor reserves (Ray sets CUDA_VISIBLE_DEVICES)")
    ray.add_argument("--strategy", type=str.upper, default="PACK", choices=("PACK", "SPREAD"),
                     help="placement group strategy: as few nodes as possible, or spread out")
    _supervision_flags(ray)
    ray.set_defaults(func=launch_ray)
    launch.set_defaults(func=lambda args: launch.print_help() or 2)


def _command(args) -> list[str]:
    return args.command[1:] if args.command[:1] == ["--"] else args.command


def _policy(args):
    from tfyard.launch.attempt import Policy

    return Policy(args.max_restarts, args.grace, args.grace_period, args.hang_timeout)


def _report(outcome, write) -> int:
    """The one final line, and the failed member's last lines unless they were the last
    ones printed (a bad flag is said once, not again here)."""
    from tfyard.errors import PAUSED_EXIT_CODE

    if outcome.returncode == PAUSED_EXIT_CODE:
        print(f"tfyard: launch {outcome.message}", file=sys.stderr)
    elif outcome.returncode:
        print("\n".join([f"tfyard: launch failed: {outcome.message}",
                         *write.unseen(outcome.tail)]), file=sys.stderr)
    return outcome.returncode


def launch_local(args) -> int:
    from tfyard.launch.local import check_cores, run_local
    from tfyard.launch.output import locked_writer
    from tfyard.launch.roster import roster

    write = locked_writer(sys.stdout)
    crowded = check_cores(len(roster(args.workers, args.chief, args.ps, args.evaluator)))
    if crowded:
        write(crowded + "\n")
    return _report(run_local(_command(args), args.workers, args.chief, args.ps, args.evaluator,
                             args.max_restarts, args.grace, grace_period=args.grace_period,
                             hang_timeout=args.hang_timeout, write=write), write)


def launch_ray(args) -> int:
    from tfyard.launch.output import locked_writer
    from tfyard.launch.ray import Placement, run_ray

    placement = Placement(args.cpus_per_member, args.gpus_per_member, args.strategy)
    write = locked_writer(sys.stdout)
    return _report(run_ray(_command(args), args.workers, args.chief, args.ps, args.evaluator,
                           args.address, placement, _policy(args), write), write)


def launch_spark(args) -> int:
    from tfyard import quiet
    from tfyard.launch.spark import end_driver_jvm, run_command, spark_context
    from tfyard.launch.supervise import MemberFailed

    quiet.install()  # before the JVM starts: its start-up notice is dropped
    failed = None
    with spark_context(args.master, args.conf) as sc:
        try:
            run_command(sc, _command(args), args.num_executors, args.num_ps, args.evaluator)
        except MemberFailed as exc:
            failed = exc
    if failed is None:
        return 0
    end_driver_jvm()  # the last word, below whatever Spark's stopping threads print
    print(f"tfyard: launch failed: {failed}", file=sys.stderr)
    return 1
