"""The supervisor's judgement of who failed, on members whose exits are scripted (the real
processes are in test_local.py and tests/reliability/test_lost_members.py)."""

from __future__ import annotations

import collections
import io
import os
import signal
import time

import pytest

from tfyard.errors import LOST_PEER_EXIT_CODE, PAUSED_EXIT_CODE, PREEMPTED_EXIT_CODE
from tfyard.launch.attempt import Policy
from tfyard.launch.output import LockedWriter
from tfyard.launch.roster import roster
from tfyard.launch.stops import Stopped, install_stop_handlers, restore_handlers, stops_held
from tfyard.launch.supervise import supervise


class Scripted:
    """A member handle that exits with `code` `after` seconds, or runs until stopped."""

    def __init__(self, code, after):
        self.code, self.at, self.lost = code, time.monotonic() + after, None
        self.tail = collections.deque(["last line"])

    def poll(self):
        return self.code if self.code is not None and time.monotonic() >= self.at else None

    def heartbeat_age(self):
        return None

    def terminate(self, signum=signal.SIGTERM):
        self.code, self.at = self.code if self.poll() is not None else -signum, 0

    def kill(self):
        self.terminate(signal.SIGKILL)

    def stop(self, grace):
        self.terminate()


class Backend:
    def __init__(self, script):
        self.script, self.spawned = script, []

    def addresses(self):
        return [f"127.0.0.1:{2000 + i}" for i in range(len(self.script))]

    def spawn(self, i, member, config):
        code, after = self.script[member.name].pop(0)
        self.spawned.append(member.name)
        return Scripted(code, after)


def run(members, script, max_restarts=0):
    lines = []
    outcome = supervise(members, Backend(script), Policy(max_restarts, grace=0, poll=0.01),
                        lines.append)
    return outcome, "".join(lines)


def test_a_member_that_lost_its_peer_is_a_symptom_the_peer_is_named():
    # worker:0 (polled first) exits 75 because worker:1 was SIGKILLed just before
    outcome, text = run(roster(2), {"worker:0": [(LOST_PEER_EXIT_CODE, 0.05)],
                                    "worker:1": [(-signal.SIGKILL, 0.05)]})
    assert outcome.failed.name == "worker:1" and outcome.returncode == 137, text
    assert text == "tfyard: worker:1 failed with signal SIGKILL\n"


def test_a_lost_peer_alone_still_spends_a_restart():
    outcome, text = run(roster(2), {"worker:0": [(LOST_PEER_EXIT_CODE, 0.05), (0, 0.05)],
                                    "worker:1": [(None, 0), (0, 0.05)]}, max_restarts=1)
    assert outcome.returncode == 0 and outcome.restarts == 1, text



def test_a_pause_ends_the_job_with_its_code_where_a_preemption_restarts_it():
    """Members that stopped at --pause_at_step did as asked: a restart would resume there
    and stop at once again, forever; a preempted job restarts without spending a credit."""
    outcome, text = run(roster(2), {"worker:0": [(PAUSED_EXIT_CODE, 0.05)],
                                    "worker:1": [(PAUSED_EXIT_CODE, 0.05)]}, max_restarts=3)
    assert (outcome.returncode, outcome.restarts, outcome.failed) == (79, 0, None), text
    assert outcome.message == "paused where --pause_at_step asked; rerun to go on"
    assert text == "tfyard: worker:0 paused (exit code 79: saved at --pause_at_step)\n"
    outcome, text = run(roster(2), {"worker:0": [(PREEMPTED_EXIT_CODE, 0.05), (0, 0.05)],
                                    "worker:1": [(None, 0), (0, 0.05)]})
    assert (outcome.returncode, outcome.restarts, outcome.preemptions) == (0, 0, 1), text

def test_a_failed_evaluator_restarts_alone_then_training_goes_on_without_it():
    members = roster(1, chief=True, evaluator=True)
    outcome, text = run(members, {"chief:0": [(0, 0.3)], "worker:0": [(None, 0)],
                                  "evaluator:0": [(1, 0.05), (1, 0.05)]}, max_restarts=1)
    assert outcome.returncode == 0, text
    assert "evaluator:0 failed with exit code 1; restarting it alone (1/1)" in text
    assert ("evaluator:0 failed with exit code 1; no restart left (--max_restarts 1), "
            "training goes on without it") in text


def test_an_error_line_is_said_once_by_the_members_and_the_final_report():
    """Whichever member says a shared error first, the others' copies and the report's
    repeat of a failed member's tail are left out; other lines still reach the report."""
    stream = io.StringIO()
    write = LockedWriter(stream)
    write("[worker:1] tfyard: error: unrecognized arguments: --bogus 1\n")
    write("[worker:0] tfyard: error: unrecognized arguments: --bogus 1\n")
    tail = ["[worker:0] something before", "[worker:0] tfyard: error: unrecognized arguments: "
            "--bogus 1"]
    assert write.unseen(tail) == ["[worker:0] something before"]
    assert stream.getvalue().count("tfyard: error:") == 1


def test_a_stop_inside_a_held_block_is_raised_once_it_ends():
    """tune asks Optuna for a trial and gives it its run inside one: a SIGTERM between the
    two must not leave a trial without a run."""
    previous = install_stop_handlers()
    done = []
    try:
        with pytest.raises(Stopped) as stopped, stops_held():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):   # the handler runs between these bytecodes
                done.append(len(done))
            done.append("whole")
        assert stopped.value.signum == signal.SIGTERM and done[-1] == "whole"
    finally:
        restore_handlers(previous)
