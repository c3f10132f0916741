"""Run a cluster as one Spark barrier stage: each task is one member.

Every task reserves a free port on its host, the tasks swap `host:port` with
`BarrierTaskContext.allGather` (the barrier stage is the rendezvous, no extra server to
trust), and each runs its member as a child process with its own TF_CONFIG. Output lines
stream back live to the driver over a socket that only accepts tasks knowing a random
token; a failing member fails the stage with that member's last lines.
"""

from __future__ import annotations

import collections
import hmac
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager

from tfyard.errors import UserError
from tfyard.launch.context import PASS_THROUGH, PAYLOAD_MODULE, Context, write_payload
from tfyard.launch.local import (
    Member,
    check_command,
    describe_exit,
    locked_writer,
    member_env,
    pump,
    roster,
    spawn,
    stop_group,
    tf_configs,
)
from tfyard.launch.ports import reserved_ports
from tfyard.launch.supervise import MemberFailed

TAIL_LINES = 50
GRACE_S = 10.0
_FAILED = re.compile(r"tfyard: (\w+:\d+) failed with ([^\n]*)")


def spark_roster(num_executors: int, num_ps: int = 0, evaluator: bool = False) -> list[Member]:
    """ps first, then one chief, then workers, then the evaluator: one member per task."""
    workers = num_executors - num_ps - 1 - int(evaluator)
    if workers < 0:
        raise UserError(
            f"{num_executors} executor(s) cannot hold {num_ps} ps + 1 chief"
            f"{' + 1 evaluator' if evaluator else ''}; raise --num_executors"
        )
    return roster(workers, chief=True, ps=num_ps, evaluator=evaluator)


@contextmanager
def spark_context(master: str, conf: Sequence[str] = (), app_name: str = "tfyard"):
    """A SparkContext fit for barrier stages (no dynamic allocation), stopped on exit."""
    try:
        from pyspark import SparkConf, SparkContext
    except ImportError:
        raise UserError("Spark support needs pyspark: pip install 'tfyard[spark]'") from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark_conf = SparkConf().setMaster(master).setAppName(app_name)
    spark_conf.set("spark.dynamicAllocation.enabled", "false")
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--conf {item!r} is not KEY=VALUE; e.g. --conf spark.task.cpus=1")
        spark_conf.set(key, value)
    sc = SparkContext(conf=spark_conf)
    try:
        yield sc
    finally:
        sc.stop()


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
        logdir = log_dir if "://" in log_dir else os.path.abspath(log_dir)
        board = [sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--port", "0",
                 "--bind_all"]
    _run_stage(sc, members, command, write, board)


def _run_stage(sc, members, command, write, board=None) -> None:
    env = {k: os.environ[k] for k in PASS_THROUGH if k in os.environ}
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


def _member_error(text: str) -> str:
    """The first member failure in a Spark error text, with that member's last lines."""
    match = _FAILED.search(text)
    if not match:
        lines = [line for line in text.splitlines() if line.strip()]
        return f"the Spark stage failed: {lines[-1] if lines else 'no reason given'}"
    name = match.group(1)
    tail = []
    for line in text[match.end():].splitlines()[1:]:
        if not line.startswith(f"[{name}] "):
            break
        tail.append(line)
    return "\n".join([f"{name} failed with {match.group(2)}", *tail])


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
        base = {**os.environ, **env}
        with _LineSource(address, token) as out:
            procs = [spawn(command(ctx, scratch), member_env(config, base, gpu and gpu.addresses))]
            if board and member.job == "chief":
                procs.append(spawn(board, base))
            tail = collections.deque(maxlen=TAIL_LINES)

            def write(line: str) -> None:
                tail.append(line)
                out(line)

            threads = [pump(procs[0].stdout, f"[{member.name}]", write)]
            threads += [pump(p.stdout, "[tensorboard]", out) for p in procs[1:]]
            try:
                code = _wait_for_chief(spark, procs[0], member.job == "chief")
            finally:
                for proc in procs:
                    stop_group(proc, GRACE_S)
                for thread in threads:
                    thread.join(timeout=5)
    if code:
        raise RuntimeError(f"tfyard: {member.name} failed with {describe_exit(code)}\n"
                           + "".join(tail))
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
        spark.allGather("")
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
