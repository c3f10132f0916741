"""Supervise a cluster's members wherever they run: failures, restarts, frozen members,
preemption and signals. `launch local` runs members as processes here, `launch ray` as
child processes of Ray actors; both hand this module one handle per member. Who the members
are is `launch.roster`; their lines go through `launch.output`.

- A member exiting non-zero stops the others and is named with its exit code and last lines;
  with --max_restarts the whole job starts again (the program resumes from its checkpoint).
  Under parameter-server training a failed worker restarts alone while the chief carries on.
- A member exiting with PREEMPTED_EXIT_CODE (143: it saved after a SIGTERM) restarts the
  job without spending a restart. One exiting LOST_PEER_EXIT_CODE (75) lost a peer: the peer
  that went first is named, and the restart spends one credit for both. One exiting
  PAUSED_EXIT_CODE (79: it saved at the --pause_at_step a scheduler asked for) ends the job
  with that code: a restart would resume there and stop at once again.
- The evaluator is a side-car: when it fails it restarts alone (spending a restart), or,
  with none left, training goes on without it.
- A member whose heartbeat file (tfyard.distribute.heartbeat) is older than --hang_timeout
  while its process is stopped or stuck in the kernel is frozen: it is killed, named, and
  the job restarts under --max_restarts.
- SIGTERM/SIGINT to the launcher are forwarded to every member, wait --grace_period s
  for them to save and exit, kill what is left, and give 128 + signal (143 for SIGTERM).

This module decides across attempts: restart the job, restart one member alone, or end.
One attempt's watch and how a failure is named are `launch.attempt`; the signals' turn into
`Stopped` is `launch.stops`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tfyard.errors import PAUSED_EXIT_CODE
from tfyard.launch.attempt import Attempt, Backend, Failure, Policy, describe_exit
from tfyard.launch.roster import Member
from tfyard.launch.stops import Stopped, install_stop_handlers, restore_handlers


class MemberFailed(Exception):
    """A member exited non-zero and the job gave up; the message is that member's error."""



@dataclass(frozen=True)
class Outcome:
    """How a launch ended: `failed` names the member that broke the last attempt."""

    returncode: int
    failed: Member | None = None
    member_code: int = 0
    restarts: int = 0
    what: str = ""
    tail: tuple[str, ...] = ()
    preemptions: int = 0

    @property
    def message(self) -> str:
        """One line; the failed member's last lines are in `tail`."""
        if self.returncode == PAUSED_EXIT_CODE:
            return "paused where --pause_at_step asked; rerun to go on"
        if self.failed is None:
            return "all members finished" if self.returncode == 0 else "stopped by a signal"
        what = self.what or f"failed with {describe_exit(self.member_code)}"
        return (f"{self.failed.name} {what}; stopped the other members "
                f"(restarts used: {self.restarts})")


def supervise(members: Sequence[Member], backend: Backend, policy: Policy,
              write: Callable[[str], None]) -> Outcome:
    """Run attempts of the job until it succeeds, gives up, or a signal stops it."""
    previous = install_stop_handlers()
    attempt = None
    counts = {"restarts": 0, "preemptions": 0}
    try:
        while True:
            attempt = Attempt(members, backend, policy, write)
            failure = _run_attempt(attempt, _replacer(attempt, policy, counts, write))
            if failure is None:
                return Outcome(0, restarts=counts["restarts"],
                               preemptions=counts["preemptions"])
            write(f"tfyard: {failure.member.name} {failure.what}\n")
            if failure.paused:   # as asked: every member stops at that step
                return Outcome(PAUSED_EXIT_CODE, restarts=counts["restarts"],
                               preemptions=counts["preemptions"])
            if failure.preempted:
                counts["preemptions"] += 1
                write("tfyard: restarting the job after a preemption "
                      "(not counted against --max_restarts)\n")
                continue
            if counts["restarts"] >= policy.max_restarts:
                code = failure.code
                return Outcome(code if code > 0 else 128 - code, failure.member, code,
                               counts["restarts"], failure.what, failure.tail,
                               counts["preemptions"])
            counts["restarts"] += 1
            write(f"tfyard: restarting the job ({counts['restarts']}/{policy.max_restarts})\n")
    except Stopped as stop:
        name = signal.Signals(stop.signum).name
        if attempt is not None:
            write(f"tfyard: {name} received; members have {policy.grace_period:g}s to save "
                  "and exit\n")
            attempt.stop(policy.grace_period, stop.signum)  # Ctrl-C stays Ctrl-C
        write(f"tfyard: {name} received; stopped all members\n")
        return Outcome(128 + stop.signum)
    finally:
        restore_handlers(previous)


def _run_attempt(attempt: Attempt, replace) -> Failure | None:
    try:
        attempt.start()
        failure = attempt.watch(replace)
    except Stopped:
        raise  # the caller stops the members, with the grace period for saving
    except BaseException:
        attempt.stop(attempt.policy.grace)
        raise
    attempt.stop(attempt.policy.grace)
    return failure


def _replacer(attempt: Attempt, policy: Policy, counts: dict,
              write: Callable[[str], None]) -> Callable[[int, Failure], bool]:
    """Under PS a worker restarts alone: the chief's ClusterCoordinator re-schedules its
    steps on the others and takes it back when it returns. The evaluator, a side-car that
    nobody waits for, restarts alone too, and with no restart left training goes on."""
    members = attempt.members
    parameter_server = any(m.job == "ps" for m in members)

    def replace(i: int, failure: Failure) -> bool:
        evaluator = members[i].job == "evaluator"
        alone = evaluator or (parameter_server and members[i].job == "worker")
        if failure.paused or not alone:
            return False
        if failure.preempted:
            counts["preemptions"] += 1
            used = "not counted"
        elif counts["restarts"] < policy.max_restarts:
            counts["restarts"] += 1
            used = f"{counts['restarts']}/{policy.max_restarts}"
        elif evaluator:
            write(f"tfyard: {members[i].name} {failure.what}; no restart left "
                  f"(--max_restarts {policy.max_restarts}), training goes on without it\n")
            attempt.dropped.add(i)
            return True
        else:
            return False
        write(f"tfyard: {members[i].name} {failure.what}; restarting it alone ({used})\n")
        attempt.handles[i].stop(0)
        attempt.spawn(i)
        return True

    return replace
