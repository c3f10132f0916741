"""One attempt of a launched job: every member started with its TF_CONFIG, watched, and
stopped together; a member that fails or freezes is named, the peer that went first rather
than its survivors. The handle a backend gives for each member (`Handle`, `Backend`) and how
the watch reacts (`Policy`) are declared here; whether the job then starts again is
`launch.supervise`.
"""

from __future__ import annotations

import collections
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tfyard.distribute.cluster import ClusterConfig
from tfyard.errors import LOST_PEER_EXIT_CODE, PAUSED_EXIT_CODE, PREEMPTED_EXIT_CODE, UserError
from tfyard.launch.roster import Member, tf_configs

SUSPEND_GAP_S = 5.0  # a longer pause of the watch loop: we were not running, judge later
STALE_S = 5.0  # a beat this late (they come every second) marks the peer that froze first


def describe_exit(code: int) -> str:
    """`exit code 3` or `signal SIGKILL` for a Popen return code."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


@dataclass(frozen=True)
class Policy:
    """How the supervisor reacts; all times in seconds."""

    max_restarts: int = 0
    grace: float = 10.0          # members' time to exit after the chief is done or a failure
    grace_period: float = 30.0   # members' time to save and exit on a signal to the launcher
    hang_timeout: float = 0.0    # a beating member silent this long is frozen; 0: never judged
    poll: float = 0.1

    def __post_init__(self):
        if self.max_restarts < 0:
            raise UserError("--max_restarts must be 0 or more")
        for flag in ("grace", "grace_period", "hang_timeout"):
            if not 0 <= getattr(self, flag) < float("inf"):
                raise UserError(f"--{flag} must be a number of seconds, 0 or more")


class Handle(Protocol):
    """One running member, wherever it runs."""

    tail: collections.deque  # its last output lines, prefixed
    lost: str | None  # why it is gone when it did not exit by itself (a lost Ray actor)

    def poll(self) -> int | None: ...
    def heartbeat_age(self) -> float | None: ...
    def terminate(self, signum: int = signal.SIGTERM) -> None: ...  # signal its group, no wait
    def kill(self) -> None: ...  # SIGKILL its process group (also works on a stopped one)
    def stop(self, grace: float) -> None: ...  # SIGTERM, SIGKILL after grace, reap, drain


class Backend(Protocol):
    def addresses(self) -> list[str]: ...  # host:port per member, for this attempt
    def spawn(self, i: int, member: Member, config: ClusterConfig) -> Handle: ...


@dataclass(frozen=True)
class Failure:
    """Why an attempt ended early: which member, its exit code, what happened."""

    member: Member
    code: int
    what: str  # `failed with exit code 3`, `froze: ...`
    tail: tuple[str, ...] = ()

    @property
    def preempted(self) -> bool:
        return self.code == PREEMPTED_EXIT_CODE

    @property
    def paused(self) -> bool:
        return self.code == PAUSED_EXIT_CODE


class Attempt:
    """One attempt: every member started, watched, and stopped together."""

    def __init__(self, members: Sequence[Member], backend: Backend, policy: Policy,
                 write: Callable[[str], None]):
        self.members, self.backend, self.policy, self.write = members, backend, policy, write
        self.handles: list[Handle | None] = [None] * len(members)
        self.configs: list[ClusterConfig] = []
        self.dropped: set[int] = set()  # members the job goes on without (an evaluator)

    def start(self) -> None:
        self.configs = tf_configs(self.members, self.backend.addresses())
        for i in range(len(self.members)):
            self.spawn(i)

    def spawn(self, i: int) -> None:
        """Start (or start again) member `i` with its own TF_CONFIG."""
        self.handles[i] = self.backend.spawn(i, self.members[i], self.configs[i])

    def coordinator(self) -> int:
        """Index of the member whose success ends the job: the chief, else worker:0."""
        names = [m.name for m in self.members]
        return names.index("chief:0") if "chief:0" in names else names.index("worker:0")

    def failure(self, i: int, code: int | None, watched_for: float) -> Failure | None:
        """Member i's failure, if it failed or froze."""
        handle, member = self.handles[i], self.members[i]
        if code not in (None, 0):
            what = handle.lost or (
                f"was preempted ({describe_exit(code)}: saved and stopped)"
                if code == PREEMPTED_EXIT_CODE else
                f"paused ({describe_exit(code)}: saved at --pause_at_step)"
                if code == PAUSED_EXIT_CODE else f"failed with {describe_exit(code)}")
            return Failure(member, code, what, tuple(handle.tail))
        timeout = self.policy.hang_timeout
        age = handle.heartbeat_age() if code is None and timeout else None
        if age is None or age <= timeout or watched_for <= timeout:
            return None
        handle.kill()
        return Failure(member, -signal.SIGKILL,
                       f"froze: no heartbeat for {age:.0f}s (--hang_timeout {timeout:g}); "
                       "killed it", tuple(handle.tail))

    def root_cause(self, i: int, failure: Failure) -> tuple[int, Failure]:
        """The member to name for `failure`: a peer whose heartbeat went silent, if any.

        TensorFlow's own coordination service gives up on a silent all-reduce peer after
        10 s and makes a healthy member exit 1 ("tasks are unhealthy"); the silent one is
        the cause, whatever --hang_timeout says.
        """
        if failure.preempted or failure.paused or failure.what.startswith("froze"):
            return i, failure
        if failure.code == LOST_PEER_EXIT_CODE:  # a symptom: name the peer that went first
            for j, handle in enumerate(self.handles):
                code = handle.poll() if j != i and j not in self.dropped else None
                if code not in (None, 0, LOST_PEER_EXIT_CODE):
                    return j, self.failure(j, code, 0.0)
        for j, handle in enumerate(self.handles):
            if j == i or handle.poll() is not None:
                continue
            age = handle.heartbeat_age()
            if age is not None and age > STALE_S:
                handle.kill()
                return j, Failure(self.members[j], -signal.SIGKILL,
                                  f"froze: no heartbeat for {age:.0f}s (then "
                                  f"{failure.member.name} {failure.what}); killed it",
                                  tuple(handle.tail))
        return i, failure

    def watch(self, replace: Callable[[int, Failure], bool]) -> Failure | None:
        """Wait until the job ends; returns the failure that ended it, or None.

        `replace(i, failure)` may restart member `i` on its own and return True, in which
        case the job goes on.
        """
        lead, lead_done_at, stopped = self.coordinator(), None, set()
        fresh_since = last_tick = time.time()
        while True:
            now = time.time()
            if now - last_tick > SUSPEND_GAP_S:  # suspended ourselves: nobody's beat is late
                fresh_since = now
            last_tick = now
            codes = [handle.poll() for handle in self.handles]
            for i, code in enumerate(codes):
                gone = i in stopped or i in self.dropped
                failure = None if gone else self.failure(i, code, now - fresh_since)
                if failure is not None:
                    i, failure = self.root_cause(i, failure)
                    if not replace(i, failure):
                        return failure
                    codes[i] = None
            if lead_done_at is None and codes[lead] == 0:
                lead_done_at = time.monotonic()
            running = [i for i, code in enumerate(codes) if code is None]
            if not running:
                return None
            if lead_done_at is not None and time.monotonic() - lead_done_at > self.policy.grace:
                stopped.update(self._stop_servers(lead, running))
            time.sleep(self.policy.poll)

    def _stop_servers(self, lead: int, running: list[int]) -> list[int]:
        # Servers never end by themselves; the evaluator does, after the final
        # checkpoint, so it is left to finish its last evaluation.
        servers = [i for i in running if self.members[i].job != "evaluator"]
        if servers:
            self.write(f"tfyard: {self.members[lead].name} finished; stopping "
                       f"{', '.join(self.members[i].name for i in servers)}\n")
            for i in servers:
                self.handles[i].stop(self.policy.grace)
        return servers

    def stop(self, grace: float, signum: int = signal.SIGTERM) -> None:
        """Signal every member at once, give them `grace` s together, then kill the rest."""
        handles = [handle for handle in self.handles if handle is not None]
        for handle in handles:
            handle.terminate(signum)
        deadline = time.monotonic() + grace
        for handle in handles:
            handle.stop(max(0.0, deadline - time.monotonic()))
