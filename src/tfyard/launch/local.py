"""`tfyard launch local`: a whole cluster as processes on this machine, supervised.

A thin supervisor, not a scheduler: one TF_CONFIG per member, every output line prefixed
with the member, each member in its own process group so a failure, Ctrl-C or SIGTERM
ends whole groups (grandchildren included) and leaves no orphans.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tfyard.distribute.cluster import ClusterConfig, parse_tf_config
from tfyard.errors import UserError
from tfyard.launch.ports import LOOPBACK, reserved_ports

_GUARD = """import os, signal, sys
sys.stdin.read()
try:
    os.killpg(int(sys.argv[1]), signal.SIGKILL)
except OSError:
    pass
"""


@dataclass(frozen=True)
class Member:
    """One cluster member: its job name and index in that job."""

    job: str
    index: int

    @property
    def name(self) -> str:
        return f"{self.job}:{self.index}"


def roster(workers: int, chief: bool = False, ps: int = 0,
           evaluator: bool = False) -> list[Member]:
    """Members in TensorFlowOnSpark's order: ps first, then chief, workers, evaluator."""
    if workers < 0 or ps < 0:
        raise UserError("--workers and --ps must be 0 or more")
    if ps and not chief:
        raise UserError("a parameter-server job needs a chief to coordinate; add --chief")
    if workers + chief < 1:
        raise UserError("the cluster has nobody to train; use --workers 1 or more (or --chief)")
    return ([Member("ps", i) for i in range(ps)] + [Member("chief", 0)] * chief
            + [Member("worker", i) for i in range(workers)]
            + [Member("evaluator", 0)] * evaluator)


def tf_configs(members: Sequence[Member], addresses: Sequence[str]) -> list[ClusterConfig]:
    """One validated ClusterConfig per member, given each member's host:port."""
    jobs: dict[str, list[str]] = {}
    for member, address in zip(members, addresses, strict=True):
        jobs.setdefault(member.job, []).append(address)
    ordered = {job: jobs[job] for job in ("chief", "worker", "ps", "evaluator") if job in jobs}
    return [parse_tf_config({"cluster": ordered, "task": {"type": m.job, "index": m.index}})
            for m in members]


def member_env(config: ClusterConfig, base: dict[str, str] | None = None,
               gpus: Sequence[str] | None = None) -> dict[str, str]:
    """The environment a member runs with: `base`, its TF_CONFIG, unbuffered Python output."""
    env = dict(os.environ if base is None else base)
    env.pop("TF_CONFIG_FILE", None)
    env["TF_CONFIG"] = json.dumps(config.to_tf_config())
    env["PYTHONUNBUFFERED"] = "1"
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    return env


def check_command(command: Sequence[str]) -> None:
    if not command:
        raise UserError("no command to run; put it after `--`, e.g. -- python train.py")


def spawn(command: Sequence[str], env: dict[str, str]) -> subprocess.Popen:
    """Start `command` in a new session (its own process group), output merged on a pipe.

    A guard process kills that whole group once our end of its stdin closes, so members
    never outlive whoever started them, even one killed by SIGKILL (a Spark task).
    """
    try:
        proc = subprocess.Popen(
            list(command), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    except OSError as exc:
        raise UserError(f"cannot start {command[0]!r} ({exc.strerror}); check the command") \
            from None
    proc.guard = subprocess.Popen([sys.executable, "-c", _GUARD, str(proc.pid)],
                                  stdin=subprocess.PIPE, start_new_session=True)
    return proc


def stop_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group, SIGKILL whatever is left after `grace` s; reap all."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)  # also grandchildren that outlived the leader
    proc.wait()
    proc.guard.stdin.close()
    proc.guard.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def pump(stream, prefix: str, write: Callable[[str], None]) -> threading.Thread:
    """Copy `stream` line by line to `write`, each line prefixed, in a daemon thread."""
    def copy():
        for raw in iter(stream.readline, b""):
            write(f"{prefix} {raw.decode('utf-8', 'replace').rstrip()}\n")
        stream.close()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


def describe_exit(code: int) -> str:
    """`exit code 3` or `signal SIGKILL` for a Popen return code."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


@dataclass(frozen=True)
class Outcome:
    """How a launch ended: `failed` names the member that broke the last attempt."""

    returncode: int
    failed: Member | None = None
    member_code: int = 0
    restarts: int = 0

    @property
    def message(self) -> str:
        if self.failed is None:
            return "all members finished" if self.returncode == 0 else "stopped by a signal"
        return (f"{self.failed.name} failed with {describe_exit(self.member_code)}; "
                f"stopped the other members (restarts used: {self.restarts})")


class _Stop(Exception):
    """SIGTERM/SIGINT reached the launcher."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _Job:
    """One attempt: every member started, watched, and stopped together."""

    def __init__(self, members: Sequence[Member], write: Callable[[str], None]):
        self.members = members
        self.write = write
        self.procs: list[subprocess.Popen] = []
        self.threads: list[threading.Thread] = []

    def start(self, configs, command, env) -> None:
        self.procs = [None] * len(self.members)
        self.threads = [None] * len(self.members)
        for i, config in enumerate(configs):
            self.spawn(i, config, command, env)

    def spawn(self, i: int, config, command, env) -> None:
        """Start (or start again) member `i` with its own TF_CONFIG."""
        member = self.members[i]
        proc = spawn(command, member_env(config, env))
        self.procs[i] = proc
        self.threads[i] = pump(proc.stdout, f"[{member.name}]", self.write)
        self.write(f"tfyard: started {member.name} (pid {proc.pid}) at {config.address}\n")

    def coordinator(self) -> int:
        """Index of the member whose success ends the job: the chief, else worker:0."""
        names = [m.name for m in self.members]
        return names.index("chief:0") if "chief:0" in names else names.index("worker:0")

    def watch(self, grace: float, poll: float = 0.1,
              replace: Callable[[int, int], bool] = lambda i, code: False,
              ) -> tuple[Member | None, int]:
        """Wait until the job ends; returns (the failed member or None, its exit code).

        `replace(i, code)` may restart failed member `i` on its own and return True, in
        which case the job goes on.
        """
        lead = self.coordinator()
        lead_done_at = None
        stopped: set[int] = set()
        while True:
            for i, proc in enumerate(self.procs):
                code = proc.poll()
                if i not in stopped and code not in (None, 0) and not replace(i, code):
                    return self.members[i], code
            if lead_done_at is None and self.procs[lead].poll() == 0:
                lead_done_at = time.monotonic()
            running = [i for i, p in enumerate(self.procs) if p.poll() is None]
            if not running:
                return None, 0
            if lead_done_at is not None and time.monotonic() - lead_done_at > grace:
                # Servers never end by themselves; the evaluator does, after the final
                # checkpoint, so it is left to finish its last evaluation.
                servers = [i for i in running if self.members[i].job != "evaluator"]
                if servers:
                    self.write(f"tfyard: {self.members[lead].name} finished; stopping "
                               f"{', '.join(self.members[i].name for i in servers)}\n")
                    for i in servers:
                        stop_group(self.procs[i], grace)
                    stopped.update(servers)
            time.sleep(poll)

    def stop(self, grace: float) -> None:
        """End every member still running, whole process groups, then drain their output."""
        procs = [proc for proc in self.procs if proc is not None]
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in procs:
            stop_group(proc, max(0.0, deadline - time.monotonic()))
        for thread in self.threads:
            if thread is not None:
                thread.join(timeout=5)


def run_local(command: Sequence[str], workers: int, chief: bool = False, ps: int = 0,
              evaluator: bool = False, max_restarts: int = 0, grace: float = 10.0,
              host: str = LOOPBACK, write: Callable[[str], None] | None = None) -> Outcome:
    """Run `command` once per member with its own TF_CONFIG until the job ends.

    A failing member stops the rest; with `max_restarts` the whole job starts again on
    the same addresses (the program resumes from its latest checkpoint), except that a
    worker of a parameter-server job restarts alone while the chief carries on. SIGINT and
    SIGTERM stop every member and give return code 128 + signal.
    """
    check_command(command)
    if max_restarts < 0:
        raise UserError("--max_restarts must be 0 or more")
    members = roster(workers, chief, ps, evaluator)
    write = write or locked_writer(sys.stdout)
    env = dict(os.environ)
    previous = _install_stop_handlers()
    try:
        with reserved_ports(len(members), host) as ports:
            configs = tf_configs(members, [f"{host}:{p}" for p in ports])
            restarts = 0
            while True:
                job = _Job(members, write)

                def replace_ps_worker(i: int, code: int, job: _Job = job) -> bool:
                    """Under PS a worker restarts alone: the chief's ClusterCoordinator
                    re-schedules its steps on the others and takes it back when it returns."""
                    nonlocal restarts
                    if not ps or members[i].job != "worker" or restarts >= max_restarts:
                        return False
                    restarts += 1
                    write(f"tfyard: {members[i].name} failed with {describe_exit(code)}; "
                          f"restarting it alone ({restarts}/{max_restarts})\n")
                    job.spawn(i, configs[i], command, env)
                    return True

                try:
                    job.start(configs, command, env)
                    failed, code = job.watch(grace, replace=replace_ps_worker)
                finally:
                    job.stop(grace)
                if failed is None:
                    return Outcome(0, restarts=restarts)
                write(f"tfyard: {failed.name} failed with {describe_exit(code)}\n")
                if restarts >= max_restarts:
                    return Outcome(code if code > 0 else 128 - code, failed, code, restarts)
                restarts += 1
                write(f"tfyard: restarting the job ({restarts}/{max_restarts})\n")
    except _Stop as stop:
        write(f"tfyard: {signal.Signals(stop.signum).name} received; stopped all members\n")
        return Outcome(128 + stop.signum)
    finally:
        _restore_handlers(previous)


def locked_writer(stream) -> Callable[[str], None]:
    lock = threading.Lock()

    def write(text: str) -> None:
        with lock:
            stream.write(text)
            stream.flush()

    return write


def _install_stop_handlers() -> dict:
    """Turn SIGINT/SIGTERM into `_Stop` in the main thread; elsewhere leave them alone."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum, _frame):
        for sig in previous:  # a second Ctrl-C must not interrupt the clean-up
            signal.signal(sig, signal.SIG_IGN)
        raise _Stop(signum)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, handler)
    return previous


def _restore_handlers(previous: dict) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)
