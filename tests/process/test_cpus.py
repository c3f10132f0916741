"""The usable CPUs: the affinity where the system gives it, every CPU elsewhere."""

import os

import pytest

from tfyard.process import cpus
from tfyard.process.cpus import usable_cpus


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux's affinity")
def test_the_affinity_where_there_is_one():
    assert usable_cpus() == sorted(os.sched_getaffinity(0))


def test_every_cpu_without_an_affinity(monkeypatch):
    monkeypatch.delattr(cpus.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(cpus.os, "cpu_count", lambda: 3)
    assert usable_cpus() == [0, 1, 2]
    monkeypatch.setattr(cpus.os, "cpu_count", lambda: None)   # unknown: one
    assert usable_cpus() == [0]
