"""The Spark launcher's pure parts: who each task is, the environment every member gets, and
how a stage failure is reported."""

from __future__ import annotations

import pytest

from tfyard.errors import UserError
from tfyard.launch.attempt import Failure
from tfyard.launch.context import Context, passed_env
from tfyard.launch.roster import Member
from tfyard.launch.spark import _failure_record, _member_error, spark_roster
from tfyard.platform import MAX_STEPS


def test_tasks_are_ps_then_chief_then_workers_then_evaluator():
    names = [m.name for m in spark_roster(5, num_ps=1, evaluator=True)]
    assert names == ["ps:0", "chief:0", "worker:0", "worker:1", "evaluator:0"]
    assert [m.name for m in spark_roster(1)] == ["chief:0"]


def test_too_few_executors_are_refused_with_the_fix():
    with pytest.raises(UserError, match="2 executor.* 2 ps \\+ 1 chief; raise --num_executors"):
        spark_roster(2, num_ps=2)


def test_the_first_member_failure_recorded_in_sparks_error_text_is_reported():
    def record(job, code, *tail):
        return _failure_record(Failure(Member(job, 1), code, f"failed with {code}", tail))

    worker = record("worker", 9, '[worker:1] step "3"')
    text = f"Job aborted ... RuntimeError: {worker}\n\tat org...\nRuntimeError: {record('ps', 1)}"
    assert _member_error(text) == 'worker:1 failed with 9\n[worker:1] step "3"'
    assert _member_error("py4j error\nExecutor lost\n") == \
        "the Spark stage failed: Executor lost"


def test_context_paths_are_absolute_against_the_driver_directory():
    ctx = Context(0, "chief", 0, {"chief": ["h:1"]}, 1, "/jobs/run1")
    assert ctx.absolute_path("data/cifar") == "/jobs/run1/data/cifar"
    assert ctx.absolute_path("/abs") == "/abs"
    assert ctx.absolute_path("hdfs://nn/x") == "hdfs://nn/x"


def test_the_step_cap_reaches_members_wherever_they_run(monkeypatch):
    """A Ray actor's or a Spark executor's environment is its node's, not the launcher's:
    TFYARD_MAX_STEPS travels with the members' own settings (a docs page's `launch ray` ran
    its full 2002 steps without it)."""
    monkeypatch.setenv(MAX_STEPS, "3")
    assert passed_env()[MAX_STEPS] == "3"


def test_a_nodes_own_step_cap_never_holds_a_run(monkeypatch):
    """An executor started while another run was capped (the docs test's Spark) keeps that
    cap in its environment: a member has the driver's cap, or none where the driver has none."""
    from tfyard.launch.context import on_node

    monkeypatch.setenv(MAX_STEPS, "3")
    assert MAX_STEPS not in on_node({"TF_CPP_MIN_LOG_LEVEL": "2"})
    assert on_node({MAX_STEPS: "5"})[MAX_STEPS] == "5"
