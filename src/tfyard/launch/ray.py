"""`tfyard launch ray`: a cluster as Ray actors, one member each, in one placement group.

Each actor holds a free port on its node; the driver reads every actor's `host:port` (an
actor call, as the Spark launcher uses allGather), builds TF_CONFIG from them, and each
actor runs its member as a child process with it. Output lines, exit codes and heartbeat
ages come back through actor calls, so Ray's own channels are the only ones: no
rendezvous server of ours. Supervision (failures, restarts, preemption, frozen members,
signals) is `tfyard.launch.supervise`, as for `launch local`. Ray is imported only here,
and only when a Ray launch runs.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from tfyard.distribute.cluster import ClusterConfig, parse_tf_config
from tfyard.distribute.jobid import job_env
from tfyard.errors import UserError
from tfyard.launch.attempt import Policy
from tfyard.launch.context import (
    PAYLOAD_MODULE,
    Context,
    on_node,
    passed_env,
    write_payload,
)
from tfyard.launch.local import ProcessMember, check_command, member_env
from tfyard.launch.output import TAIL_LINES, locked_writer
from tfyard.launch.ports import reserve_port
from tfyard.launch.roster import Member, roster
from tfyard.launch.supervise import MemberFailed, Outcome, supervise
from tfyard.quiet.python_noise import drop_python_noise

INSTALL_HINT = "Ray support needs ray: pip install 'tfyard[ray]'"
STRATEGIES = ("PACK", "SPREAD")
PLACEMENT_TIMEOUT_S = 60.0
# What Ray's client says, line after line until it gives up, to a head that wants a token.
TOKEN_REFUSED = b"InvalidAuthToken"
CALL_TIMEOUT_S = 60.0


def import_ray():
    """The ray module, or a one-line UserError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return ray


@dataclass(frozen=True)
class Placement:
    """What each member's actor reserves, and how the placement group spreads them."""

    cpus: float = 1.0
    gpus: float = 0.0
    strategy: str = "PACK"

    def __post_init__(self):
        if not 0 < self.cpus < float("inf") or not 0 <= self.gpus < float("inf"):
            raise UserError("--cpus_per_member must be above 0 and --gpus_per_member 0 or more")
        if self.strategy not in STRATEGIES:
            raise UserError(f"--strategy {self.strategy!r} is not one of {', '.join(STRATEGIES)}")

    @property
    def bundle(self) -> dict[str, float]:
        return {"CPU": self.cpus, **({"GPU": self.gpus} if self.gpus else {})}


@contextmanager
def ray_session(address: str | None = None):
    """Use the Ray this process is connected to, else connect (or start a local one)."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    drop_python_noise()  # Ray's notice that the Ray it starts uses token authentication
    where = address or "the default address"
    with tempfile.TemporaryFile() as said:
        try:
            with _stderr_into(said):   # Ray's C++ client retries with a line each second
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            said.seek(0)
            if TOKEN_REFUSED in said.read():
                raise UserError(f"Ray at {where} uses token authentication and refused this "
                                "process: set RAY_AUTH_MODE=token and the head's token in "
                                "RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH; `ray get-auth-token` "
                                "on the head prints it)") from None
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise UserError(f"cannot connect to Ray at {where} ({reason}); start one with "
                            "`ray start --head` or check --address") from None
        said.seek(0)
        _replayed(said.read())
    try:
        yield ray
    finally:
        ray.shutdown()


@contextmanager
def _stderr_into(file):
    """File descriptor 2 (where Ray's C++ client writes) into `file` for the block."""
    sys.stderr.flush()
    real = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(real, 2)
        os.close(real)


def _replayed(data: bytes) -> None:
    """What Ray printed while it connected, on stderr after all (it connected: nothing was
    a refusal)."""
    if data:
        sys.stderr.flush()
        os.write(2, data)


class MemberActor:
    """Lives in a Ray worker process: holds a port on its node, runs one member at a time as
    its child process (a ProcessMember, as `launch local` does) and buffers its output."""

    def __init__(self, cwd: str):
        import ray

        self.host = ray.util.get_node_ip_address()
        self.port = reserve_port(self.host)
        self.scratch = tempfile.mkdtemp(prefix="tfyard-ray-")
        self.cwd = cwd if os.path.isdir(cwd) else None
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.member: ProcessMember | None = None

    def address(self) -> str:
        return f"{self.host}:{self.port.getsockname()[1]}"

    def start(self, name: str, command: Sequence[str] | None, tf_config: dict,
              env: dict[str, str], payload: tuple | None, heartbeat: bool) -> int:
        """Start the member (stopping any earlier one); returns its pid."""
        if self.member is not None:
            self.member.stop(0)
        if payload is not None:
            command = [sys.executable, "-m", PAYLOAD_MODULE,
                       write_payload(self.scratch, *payload)]
        env = member_env(parse_tf_config(tf_config), on_node(env))
        beat = os.path.join(self.scratch, "heartbeat") if heartbeat else None
        self.member = ProcessMember(name, command, env, self._keep, beat, self.cwd)
        return self.member.proc.pid

    def _keep(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)

    def _drain(self) -> list[str]:
        with self.lock:
            lines, self.lines = self.lines, []
        return lines

    def poll(self) -> tuple[list[str], int | None, float | None]:
        """New output lines, the exit code (None while running), the heartbeat's age."""
        code = self.member.poll()
        if code is not None:
            self.member.thread.join(timeout=2)  # its last lines
        return self._drain(), code, self.member.heartbeat_age()

    def signal(self, signum: int) -> None:
        if signum == signal.SIGKILL:
            self.member.kill()
        else:
            self.member.terminate(signum)

    def stop(self, grace: float) -> tuple[list[str], int | None]:
        """Stop the member (SIGTERM, SIGKILL after `grace`); its last lines and exit code."""
        self.member.stop(grace)
        return self._drain(), self.member.poll()

    def close(self) -> None:
        if self.member is not None:
            self.member.stop(0)
        self.port.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


class _ActorMember:
    """The driver's handle on one member: every question is an actor call."""

    def __init__(self, actor, write: Callable[[str], None]):
        self.actor, self.write = actor, write
        self.tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
        self.lost: str | None = None
        self.code: int | None = None
        self.age: float | None = None
        self.stopped = False

    def _call(self, method: str, *args, timeout: float = CALL_TIMEOUT_S):
        ray = import_ray()
        return ray.get(getattr(self.actor, method).remote(*args), timeout=timeout)

    def _show(self, lines: list[str]) -> None:
        for line in lines:
            self.tail.append(line.rstrip("\n"))
            self.write(line)

    def poll(self) -> int | None:
        if self.code is None and not self.stopped:
            try:
                lines, self.code, self.age = self._call("poll")
            except Exception as exc:  # noqa: BLE001 - a lost actor or node, a timed-out call
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                self.lost, self.code, lines = f"lost its Ray actor ({reason})", 1, []
            self._show(lines)
        return self.code

    def heartbeat_age(self) -> float | None:
        return self.age

    def terminate(self, signum: int = signal.SIGTERM) -> None:
        self.actor.signal.remote(signum)  # actor calls run in order: before stop()

    def kill(self) -> None:
        self._quietly(CALL_TIMEOUT_S, "signal", signal.SIGKILL)

    def stop(self, grace: float) -> None:
        if not self.stopped:
            self.stopped = True
            lines, code = self._quietly(CALL_TIMEOUT_S + grace, "stop", grace) or ([], None)
            self._show(lines)
            if self.code is None:  # a stopped member has ended, whatever the actor says
                self.code = -signal.SIGKILL if code is None else code

    def _quietly(self, timeout: float, method: str, *args):
        try:
            return self._call(method, *args, timeout=timeout)
        except Exception:  # noqa: BLE001 - the actor is gone: so is its member's group
            return None


class _RayBackend:
    """One actor per member in one placement group; a lost actor is replaced at restart."""

    def __init__(self, ray, count: int, placement: Placement, work: dict,
                 write: Callable[[str], None]):
        self.ray, self.placement, self.work, self.write = ray, placement, work, write
        self.group = ray.util.placement_group([placement.bundle] * count,
                                              strategy=placement.strategy)
        try:
            ray.get(self.group.ready(), timeout=PLACEMENT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            ray.util.remove_placement_group(self.group)
            raise UserError(
                f"Ray cannot place {count} members of {placement.bundle} "
                f"({placement.strategy}) within {PLACEMENT_TIMEOUT_S:g}s; the cluster has "
                f"{ray.cluster_resources()}; lower --cpus_per_member/--gpus_per_member") \
                from None
        self.actor_class = ray.remote(MemberActor)
        self.actors = [self._actor(i) for i in range(count)]

    def _actor(self, i: int):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        where = PlacementGroupSchedulingStrategy(placement_group=self.group,
                                                 placement_group_bundle_index=i)
        return self.actor_class.options(
            num_cpus=self.placement.cpus, num_gpus=self.placement.gpus,
            scheduling_strategy=where).remote(self.work["cwd"])

    def addresses(self) -> list[str]:
        found = []
        for i in range(len(self.actors)):
            try:
                found.append(self.ray.get(self.actors[i].address.remote(), timeout=CALL_TIMEOUT_S))
            except self.ray.exceptions.RayError:  # its worker or node died: a new actor
                self.actors[i] = self._actor(i)
                found.append(self.ray.get(self.actors[i].address.remote(), timeout=CALL_TIMEOUT_S))
        return found

    def spawn(self, i: int, member: Member, config: ClusterConfig) -> _ActorMember:
        payload = None
        if self.work["payload"] is not None:
            payload = (self.work["payload"], Context(
                i, member.job, member.index, config.to_tf_config()["cluster"],
                config.num_workers, self.work["cwd"]))
        pid = self.ray.get(self.actors[i].start.remote(
            member.name, self.work["command"], config.to_tf_config(), self.work["env"], payload,
            self.work["heartbeat"]), timeout=CALL_TIMEOUT_S)
        self.write(f"tfyard: started {member.name} (pid {pid}) at {config.address}\n")
        return _ActorMember(self.actors[i], self.write)

    def close(self) -> None:
        for actor in self.actors:
            try:
                self.ray.get(actor.close.remote(), timeout=CALL_TIMEOUT_S)
            except self.ray.exceptions.RayError:
                pass
            self.ray.kill(actor)
        self.ray.util.remove_placement_group(self.group)


def _launch(members: list[Member], placement: Placement | None, policy: Policy | None,
            address: str | None, write: Callable[[str], None] | None,
            command: Sequence[str] | None = None, payload: bytes | None = None) -> Outcome:
    write = write or locked_writer(sys.stdout)
    placement, policy = placement or Placement(), policy or Policy()
    work = {"cwd": os.getcwd(), "command": list(command) if command else None,
            "payload": payload, "heartbeat": bool(policy.hang_timeout),
            "env": job_env(passed_env())}
    with ray_session(address) as ray:
        backend = _RayBackend(ray, len(members), placement, work, write)
        try:
            return supervise(members, backend, policy, write)
        finally:
            backend.close()


def run_ray(command: Sequence[str], workers: int, chief: bool = False, ps: int = 0,
            evaluator: bool = False, address: str | None = None,
            placement: Placement | None = None, policy: Policy | None = None,
            write: Callable[[str], None] | None = None) -> Outcome:
    """Run `command` as every member of the cluster, one Ray actor each."""
    check_command(command)
    members = roster(workers, chief, ps, evaluator)
    return _launch(members, placement, policy, address, write, command=command)


def run_function(main_fun: Callable, args: Sequence[str], num_workers: int, num_ps: int = 0,
                 chief: bool | None = None, evaluator: bool = False, address: str | None = None,
                 placement: Placement | None = None, policy: Policy | None = None,
                 write: Callable[[str], None] | None = None) -> Outcome:
    """Run `main_fun(args, ctx)` in a fresh Python process for every member; raises
    MemberFailed with the failing member's error and last lines."""
    ray = import_ray()
    members = roster(num_workers, bool(num_ps) if chief is None else chief, num_ps, evaluator)
    payload = ray.cloudpickle.dumps((main_fun, list(args)))
    outcome = _launch(members, placement, policy, address, write, payload=payload)
    if outcome.returncode:
        raise MemberFailed("\n".join([outcome.message, *outcome.tail]))
    return outcome
