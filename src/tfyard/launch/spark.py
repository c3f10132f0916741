"""Run a cluster as one Spark barrier stage: each task is one member.

Every task reserves a free port on its host, the tasks swap `host:port` with
`BarrierTaskContext.allGather` (the barrier stage is the rendezvous, no extra server to
trust), and each runs its member as a child process with its own TF_CONFIG. Output lines
stream back live to the driver over a socket that only accepts tasks knowing a random
token; a failing member fails the stage with a record of its failure and last lines, which
Spark carries to the driver inside its own error text.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager

from tfyard.distribute.jobid import job_env
from tfyard.errors import UserError
from tfyard.launch.attempt import Failure, describe_exit
from tfyard.launch.context import (
    PAYLOAD_MODULE,
    Context,
    on_node,
    passed_env,
    write_payload,
)
from tfyard.launch.local import ProcessMember, check_command, member_env, stop_group
from tfyard.launch.output import locked_writer
from tfyard.launch.ports import reserved_ports
from tfyard.launch.roster import Member, roster, tf_configs
from tfyard.launch.supervise import MemberFailed
from tfyard.storage import scheme_of

GRACE_S = 10.0
_FAILURE = "tfyard-member-failure "  # heads the JSON record of a failed member


def spark_roster(num_executors: int, num_ps: int = 0, evaluator: bool = False) -> list[Member]:
    """ps first, then one chief, then workers, then the evaluator: one member per task."""
    workers = num_executors - num_ps - 1 - int(evaluator)
    if workers < 0:
        raise UserError(
            f"{num_executors} executor(s) cannot hold {num_ps} ps + 1 chief"
            f"{' + 1 evaluator' if evaluator else ''}; raise --num_executors"
        )
    return roster(workers, chief=True, ps=num_ps, evaluator=evaluator)


# The driver's log4j2 configuration: errors only. Spark's own start-up lines (its default
# profile, "Setting default log level", loopback and native-hadoop WARNs) say nothing a
# launch's user acts on; the gateway's logger is named so Spark sees no level to announce.
# A local executor's "Exception in task" (~50 lines a try) is the member failure that the
# driver raises and tfyard says in one line.
LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = off
"""


@contextmanager
def spark_context(master: str, conf: Sequence[str] = (), app_name: str = "tfyard"):
    """A SparkContext fit for barrier stages (no dynamic allocation), stopped on exit; the
    Spark session this process already runs, if any, is used as it is and left running.

    Unless `conf` says otherwise, the driver logs errors only (LOG4J2) and draws no stage
    bar, which would be glued onto the members' lines."""
    try:
        from pyspark import SparkConf, SparkContext
        from pyspark.sql import SparkSession
    except ImportError:
        raise UserError("Spark support needs pyspark: pip install 'tfyard[spark]'") from None
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active.sparkContext
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark_conf = SparkConf().setMaster(master).setAppName(app_name)
    spark_conf.set("spark.dynamicAllocation.enabled", "false")
    spark_conf.set("spark.ui.showConsoleProgress", "false")
    with tempfile.NamedTemporaryFile("w", prefix="tfyard-log4j2-", suffix=".properties") as log:
        log.write(LOG4J2)
        log.flush()
        spark_conf.set("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log.name}")
        for item in conf:
            key, sep, value = item.partition("=")
            if not sep:
                raise UserError(
                    f"--conf {item!r} is not KEY=VALUE; e.g. --conf spark.task.cpus=1")
            spark_conf.set(key, value)
        sc = SparkContext(conf=spark_conf)  # the JVM has read the configuration
    try:
        yield sc
    finally:
        sc.stop()


def end_driver_jvm() -> None:
    """End the JVM that spark_context started, once it has stopped.

    A stopped SparkContext's threads can still print a killed barrier task's stack trace
    seconds later; a command whose last line must be its own ends the JVM first."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    if proc is not None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    SparkContext._gateway = SparkContext._jvm = None


def run_command(sc, command: Sequence[str], num_executors: int, num_ps: int = 0,
                evaluator: bool = False, write: Callable[[str], None] | None = None) -> None:
    """Run `command` as every member of the cluster, one barrier task each."""
    check_command(command)
    members = spark_roster(num_executors, num_ps, evaluator)
    _run_stage(sc, members, lambda _ctx, _dir: list(command), write)


def run_function(sc, main_fun: Callable, args: Sequence[str], num_executors: int,
                 num_ps: int = 0, tensorboard: bool = False, log_dir: str | None = None,
                 write: Callable[[str], None] | None = None) -> None:
    """Run `main_fun(args, ctx)` in a fresh Python process for every member."""
    if tensorboard and not log_dir:
        raise UserError("tensorboard=True needs log_dir= (the directory TensorBoard shows)")
    from pyspark import cloudpickle

    payload = cloudpickle.dumps((main_fun, list(args)))
    members = spark_roster(num_executors, num_ps)

    def command(ctx: Context, scratch: str) -> list[str]:
        return [sys.executable, "-m", PAYLOAD_MODULE, write_payload(scratch, payload, ctx)]

    board = None
    if tensorboard:  # on the chief's executor, next to its member
        logdir = log_dir if scheme_of(log_dir) is not None else os.path.abspath(log_dir)
        board = [sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--port", "0",
                 "--bind_all"]
    _run_stage(sc, members, command, write, board)


def _run_stage(sc, members, command, write, board=None) -> None:
    env = job_env(passed_env())
    cwd = os.getcwd()
    with _LineSink(sc.getConf().get("spark.driver.host", "127.0.0.1"), write) as sink:
        address, token = sink.address, sink.token

        def task(_partition):
            yield _run_member(members, command, env, cwd, address, token, board)

        rdd = sc.parallelize(range(len(members)), len(members)).barrier().mapPartitions(task)
        try:
            # Spark never retries a failed barrier ResultStage ("Could not recover"); behind
            # a shuffle the barrier stage is a ShuffleMapStage, which Spark relaunches whole
            # (spark.task.maxFailures, spark.stage.maxConsecutiveAttempts): every member
            # starts again and `tfyard train` resumes from its latest checkpoint.
            rdd.repartition(1).collect()
        except Exception as exc:  # py4j wraps the task's error in the driver's exception
            raise MemberFailed(_member_error(str(exc))) from None


def _failure_record(failure: Failure) -> str:
    """What a failed task raises: its Failure as one JSON record, which Spark's error text
    carries to the driver unchanged."""
    return _FAILURE + json.dumps(dataclasses.asdict(failure))


def _member_error(text: str) -> str:
    """The first member failure recorded in a Spark error text, with its last lines."""
    _, found, record = text.partition(_FAILURE)
    if not found:
        lines = [line for line in text.splitlines() if line.strip()]
        return f"the Spark stage failed: {lines[-1] if lines else 'no reason given'}"
    fields, _ = json.JSONDecoder().raw_decode(record)
    failure = Failure(**{**fields, "member": Member(**fields["member"])})
    return "\n".join([f"{failure.member.name} {failure.what}", *failure.tail])


def _run_member(members, command, env, cwd, address, token, board) -> str:
    """The body of one barrier task: rendezvous, then run this task's member to the end."""
    from pyspark import BarrierTaskContext

    spark = BarrierTaskContext.get()
    rank = spark.partitionId()
    member = members[rank]
    host = os.environ.get("SPARK_LOCAL_IP") or socket.gethostbyname(socket.gethostname())
    with reserved_ports(1, host) as (port,), tempfile.TemporaryDirectory() as scratch:
        config = tf_configs(members, spark.allGather(f"{host}:{port}"))[rank]
        gpu = spark.resources().get("gpu")
        ctx = Context(rank, member.job, member.index, config.to_tf_config()["cluster"],
                      config.num_workers, cwd)
        base = on_node(env)
        with _LineSource(address, token) as out:
            handles = [ProcessMember(member.name, command(ctx, scratch),
                                     member_env(config, base, gpu and gpu.addresses), out)]
            if board and member.job == "chief":
                handles.append(ProcessMember("tensorboard", board, base, out))
            try:
                code = _wait_for_chief(spark, handles[0].proc, member.job == "chief")
            finally:
                for handle in handles:
                    handle.stop(GRACE_S)
    if code:
        tail = tuple(handles[0].tail)
        raise RuntimeError(_failure_record(
            Failure(member, code, f"failed with {describe_exit(code)}", tail)))
    return member.name


def _wait_for_chief(spark, proc: subprocess.Popen, is_chief: bool) -> int:
    """Wait for this member; the job is over once the chief has exited 0.

    Every task calls allGather once: the chief after its member succeeds, the others
    at once from a watcher thread, which therefore returns exactly when the chief is
    done and then gives its member GRACE_S seconds before stopping it (ps servers, an
    evaluator). Members stopped that way count as finished.
    """
    if is_chief:
        code = proc.wait()
        if code == 0:
            spark.allGather("chief done")
        return code
    stopped = threading.Event()

    def stop_after_chief():
        try:
            spark.allGather("")
        except Exception:  # noqa: BLE001 - the stage was cancelled: a member failed, and
            return         # this task ends with its own member (no traceback of ours)
        try:
            proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            stopped.set()
            stop_group(proc, GRACE_S)

    watcher = threading.Thread(target=stop_after_chief, daemon=True)
    watcher.start()
    code = proc.wait()
    if code == 0 or stopped.is_set():
        watcher.join()  # leave the barrier only together with the chief
        return 0
    return code


class _LineSink:
    """Driver side: accept task connections that present the token, write their lines."""

    def __init__(self, host: str, write: Callable[[str], None] | None):
        self.token = secrets.token_hex(16)
        self.write = write or locked_writer(sys.stdout)
        self.server = socket.create_server((host, 0))
        self.address = f"{host}:{self.server.getsockname()[1]}"

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.close()

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn, conn.makefile("r", encoding="utf-8", errors="replace") as lines:
            if not hmac.compare_digest(lines.readline().strip(), self.token):
                return
            for line in lines:
                self.write(line)


class _LineSource:
    """Task side: send lines to the driver, or to this executor's stdout if unreachable."""

    def __init__(self, address: str, token: str):
        host, _, port = address.rpartition(":")
        self.lock = threading.Lock()
        try:
            self.sock = socket.create_connection((host, int(port)), timeout=10)
            self.sock.sendall(f"{token}\n".encode())
        except OSError:
            self.sock = None

    def __enter__(self):
        return self

    def __call__(self, line: str) -> None:
        with self.lock:
            if self.sock is None:
                sys.stdout.write(line)
                sys.stdout.flush()
            else:
                self.sock.sendall(line.encode("utf-8"))

    def __exit__(self, *exc):
        if self.sock is not None:
            self.sock.close()
