"""The learning-rate schedule: linear warm-up, then piecewise drops or a cosine to zero."""

from __future__ import annotations

import pytest

from tfyard.train.optim import WarmupSchedule, make_schedule
from tfyard.train.task.recipes import Resolved


def _at(schedule, *steps):
    return [float(schedule(s)) for s in steps]


def test_warmup_then_piecewise_drops():
    schedule = WarmupSchedule(peak=1.0, total_steps=100, warmup_steps=4, boundaries=(50, 75))
    assert _at(schedule, 0, 1, 3, 4, 49, 50, 74, 75, 99) == pytest.approx(
        [0.25, 0.5, 1.0, 1.0, 1.0, 0.1, 0.1, 0.01, 0.01])


def test_cosine_reaches_zero_at_the_end():
    schedule = WarmupSchedule(peak=2.0, total_steps=110, warmup_steps=10, kind="cosine")
    assert _at(schedule, 10, 60, 110, 500) == pytest.approx([2.0, 1.0, 0.0, 0.0], abs=1e-6)


def test_make_schedule_turns_epochs_into_steps():
    numbers = Resolved(global_batch=128, per_replica_batch=128, learning_rate=0.1,
                       optimizer="sgd", lr_schedule="piecewise", decay_epochs=(2, 3),
                       warmup_epochs=0.5, weight_decay=0.0, steps_per_epoch=10, total_steps=40)
    schedule = make_schedule(numbers)
    assert (schedule.warmup_steps, schedule.boundaries) == (5, (20, 30))
    assert WarmupSchedule(**schedule.get_config()).get_config() == schedule.get_config()
