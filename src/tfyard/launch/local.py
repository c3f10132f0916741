"""`tfyard launch local`: a whole cluster as processes on this machine, supervised.

A thin supervisor, not a scheduler: one TF_CONFIG per member, every output line prefixed
with the member, each member in its own process group so a failure, Ctrl-C or SIGTERM
ends whole groups (grandchildren included) and leaves no orphans. What to do when a member
fails, is preempted or freezes is `tfyard.launch.supervise`, shared with `launch ray`, whose
actors run their members as the ProcessMember defined here.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence

from tfyard.distribute import heartbeat
from tfyard.distribute.cluster import ClusterConfig
from tfyard.distribute.jobid import job_env
from tfyard.errors import UserError
from tfyard.launch.attempt import Policy
from tfyard.launch.output import TAIL_LINES, locked_writer
from tfyard.launch.ports import LOOPBACK, reserved_ports
from tfyard.launch.roster import roster
from tfyard.launch.supervise import Outcome, supervise
from tfyard.process.cpus import usable_cpus

_GUARD = """import os, signal, sys
sys.stdin.read()
try:
    os.killpg(int(sys.argv[1]), signal.SIGKILL)
except OSError:
    pass
"""


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


# Members per CPU core: beyond WARN_PER_CORE each trains visibly slower than fewer would;
# beyond MAX_PER_CORE the machine mostly switches between them (and their TensorFlow
# runtimes, ~0.5 GB each, may not fit in memory), so the launch is refused.
WARN_PER_CORE, MAX_PER_CORE = 2, 8


def check_cores(members: int, cores: int | None = None) -> str | None:
    """Refuse more members than this machine can run; a warning line when it is crowded."""
    cores = cores or len(usable_cpus())
    if members > MAX_PER_CORE * cores:
        raise UserError(
            f"{members} members on {cores} CPU core(s) is more than {MAX_PER_CORE} a core; "
            f"start at most {MAX_PER_CORE * cores} here, or spread them over machines with "
            "`tfyard launch ray` or `launch spark`")
    if members > WARN_PER_CORE * cores:
        return (f"tfyard: warning: {members} members share {cores} CPU core(s); each trains "
                "slower than with fewer members")
    return None


def check_command(command: Sequence[str]) -> None:
    if not command:
        raise UserError("no command to run; put it after `--`, e.g. -- python train.py")


def spawn(command: Sequence[str], env: dict[str, str],
          cwd: str | None = None) -> subprocess.Popen:
    """Start `command` in a new session (its own process group), output merged on a pipe.

    A guard process kills that whole group once our end of its stdin closes, so members
    never outlive whoever started them, even one killed by SIGKILL (a Spark task).
    """
    try:
        proc = subprocess.Popen(
            list(command), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
        )
    except OSError as exc:
        raise UserError(f"cannot start {command[0]!r} ({exc.strerror}); check the command") \
            from None
    proc.guard = guard(proc.pid)
    return proc


def guard(pid: int) -> subprocess.Popen:
    """A process that SIGKILLs the process group `pid` once our end of its stdin closes (we
    closed it, or we died)."""
    return subprocess.Popen([sys.executable, "-c", _GUARD, str(pid)], stdin=subprocess.PIPE,
                            start_new_session=True)


def stop_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group, SIGKILL whatever is left after `grace` s; reap all."""
    signal_group(proc, signal.SIGTERM)
    end_group(proc, grace)


def end_group(proc: subprocess.Popen, grace: float) -> None:
    """The one end of a group `spawn` started (or a fork server's, alike): its leader waited
    for up to `grace` s, then SIGKILL to whatever is left of the group; the leader and its
    guard reaped."""
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    signal_group(proc, signal.SIGKILL)  # also grandchildren that outlived the leader
    proc.wait()
    proc.guard.stdin.close()
    proc.guard.wait()


def signal_group(proc: subprocess.Popen, sig: int) -> None:
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


class ProcessMember:
    """A member running as a process group here, its output pumped, prefixed, to `write`.

    With `beat_file` the member is asked (TFYARD_HEARTBEAT_FILE) to beat into that file.
    """

    def __init__(self, name: str, command: Sequence[str], env: dict[str, str],
                 write: Callable[[str], None], beat_file: str | None = None,
                 cwd: str | None = None):
        self.beat_file, self.lost, self.stopped = beat_file, None, False
        if beat_file:
            if os.path.exists(beat_file):
                os.unlink(beat_file)
            env = {**env, heartbeat.ENV: beat_file}
        self.tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
        self.proc = spawn(command, env, cwd)

        def keep(line: str) -> None:
            self.tail.append(line.rstrip("\n"))
            write(line)

        self.thread = pump(self.proc.stdout, f"[{name}]", keep)

    def poll(self) -> int | None:
        return self.proc.poll()

    def heartbeat_age(self) -> float | None:
        """Its heartbeat's age while it is stopped or stuck in the kernel, else None."""
        return heartbeat.frozen_for(self.beat_file, self.proc.pid) if self.beat_file else None

    def terminate(self, signum: int = signal.SIGTERM) -> None:
        signal_group(self.proc, signum)

    def kill(self) -> None:
        signal_group(self.proc, signal.SIGKILL)

    def stop(self, grace: float) -> None:
        if not self.stopped:
            self.stopped = True
            stop_group(self.proc, grace)
            self.thread.join(timeout=5)


class _LocalBackend:
    """Members as processes on this machine, on ports reserved for the whole launch."""

    def __init__(self, command, env, addresses, write, beat_dir: str | None):
        self.command, self.env, self.write, self.beat_dir = command, env, write, beat_dir
        self._addresses = addresses

    def addresses(self) -> list[str]:
        return self._addresses

    def spawn(self, i: int, member, config: ClusterConfig) -> ProcessMember:
        beat = os.path.join(self.beat_dir, f"{member.job}-{member.index}") \
            if self.beat_dir else None
        handle = ProcessMember(member.name, self.command, member_env(config, self.env),
                               self.write, beat)
        self.write(f"tfyard: started {member.name} (pid {handle.proc.pid}) at "
                   f"{config.address}\n")
        return handle


def run_local(command: Sequence[str], workers: int, chief: bool = False, ps: int = 0,
              evaluator: bool = False, max_restarts: int = 0, grace: float = 10.0,
              host: str = LOOPBACK, write: Callable[[str], None] | None = None,
              grace_period: float = 30.0, hang_timeout: float = 0.0) -> Outcome:
    """Run `command` once per member with its own TF_CONFIG until the job ends.

    A failing member stops the rest; with `max_restarts` the whole job starts again on
    the same addresses (the program resumes from its latest checkpoint), except that a
    worker of a parameter-server job restarts alone while the chief carries on. A member
    exiting 143 (preempted, saved) restarts the job without spending a restart; one whose
    heartbeat is older than `hang_timeout` s is frozen (see `tfyard.launch.attempt`).
    SIGINT and SIGTERM reach every member, which get `grace_period` s to save and exit;
    the return code is then 128 + signal.
    """
    check_command(command)
    policy = Policy(max_restarts, grace, grace_period, hang_timeout)
    members = roster(workers, chief, ps, evaluator)
    write = write or locked_writer(sys.stdout)
    with reserved_ports(len(members), host) as ports, \
            tempfile.TemporaryDirectory(prefix="tfyard-heartbeats-") as beats:
        backend = _LocalBackend(command, job_env(dict(os.environ)), [f"{host}:{p}" for p in ports],
                                write, beats if hang_timeout else None)
        return supervise(members, backend, policy, write)
