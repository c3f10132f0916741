"""Role + devices -> behaviour and strategy, as DESIGN.md's table says."""

from __future__ import annotations

import pytest

from tfyard.distribute.cluster import SINGLE, parse_tf_config
from tfyard.distribute.strategy import choose
from tfyard.errors import UserError

ALLREDUCE = {"cluster": {"chief": ["a:1"], "worker": ["a:2"]}}
PS = {"cluster": {"chief": ["a:1"], "worker": ["a:2", "a:3"], "ps": ["a:4"]}}


def cluster(shape, task_type, index=0):
    return parse_tf_config({**shape, "task": {"type": task_type, "index": index}})


@pytest.mark.parametrize("gpus, expected", [(0, "one_device"), (1, "one_device"),
                                            (4, "mirrored")])
def test_single_process_by_gpu_count(gpus, expected):
    plan = choose(SINGLE, gpus)
    assert (plan.behaviour, plan.strategy) == ("train", expected)


@pytest.mark.parametrize("task", ["chief", "worker"])
def test_allreduce_members(task):
    plan = choose(cluster(ALLREDUCE, task), 0)
    assert (plan.behaviour, plan.strategy) == ("train", "multi_worker_mirrored")


@pytest.mark.parametrize("task, behaviour", [("chief", "train"), ("worker", "serve"),
                                             ("ps", "serve")])
def test_parameter_server_roles(task, behaviour):
    plan = choose(cluster(PS, task), 0)
    assert (plan.behaviour, plan.strategy) == (behaviour, "parameter_server")


def test_evaluator_is_a_local_side_car():
    plan = choose(cluster(PS, "evaluator"), 2)
    assert (plan.behaviour, plan.strategy) == ("evaluate", "mirrored")


def test_overrides_that_make_sense():
    assert choose(SINGLE, 4, "one_device").strategy == "one_device"
    assert choose(SINGLE, 0, "mirrored").strategy == "mirrored"
    assert choose(SINGLE, 0, "multi_worker_mirrored").strategy == "multi_worker_mirrored"
    assert choose(SINGLE, 0, "off").strategy == "off"
    assert choose(cluster(ALLREDUCE, "worker"), 0, "multi_worker_mirrored").behaviour == "train"


@pytest.mark.parametrize("config, override, fragment", [
    (SINGLE, "parameter_server", "needs ps tasks"),
    (cluster(ALLREDUCE, "chief"), "parameter_server", "needs ps tasks"),
    (cluster(PS, "chief"), "multi_worker_mirrored", "cannot use the ps tasks"),
    (cluster(ALLREDUCE, "chief"), "mirrored", "trains on one machine"),
    (cluster(PS, "evaluator"), "parameter_server", "not for the evaluator"),
    (SINGLE, "horovod", "unknown"),
])
def test_impossible_choices(config, override, fragment):
    with pytest.raises(UserError, match=fragment):
        choose(config, 0, override)
