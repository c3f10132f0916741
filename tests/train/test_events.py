"""A resumed run's TensorBoard events, read back by TensorBoard's own loader: each step once,
with its latest value."""

from __future__ import annotations

import shutil

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util.tensor_util import make_ndarray

from tfyard.train.rundir.report import Reporter


def reported(tmp_path, steps, value: float, start: int | None = None) -> None:
    reporter = Reporter(str(tmp_path), str(tmp_path / "logs"), start=start)
    for step in steps:
        reporter.report(step, step / 2, {"loss": value})
        if step % 4 == 0:
            reporter.report(step, step / 2, {"loss": value, "top1": value}, kind="eval")
    reporter.close()


def shown(folder) -> dict[int, float]:
    """The steps and values TensorBoard shows for `loss` in `folder`; each step once."""
    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    events = accumulator.Tensors("loss")
    steps = [event.step for event in events]
    assert len(steps) == len(set(steps)), steps
    return {event.step: float(make_ndarray(event.tensor_proto)) for event in events}


def test_a_resume_shows_each_step_once_with_its_latest_value(tmp_path):
    reported(tmp_path, range(1, 7), 1.0)
    first, = (tmp_path / "logs" / "train").iterdir()
    before = tmp_path / "first-run-events"
    shutil.copy(first, before)
    with open(first, "ab") as handle:   # a record torn by the kill
        handle.write(b"\x40\x00\x00\x00\x00\x00\x00\x00\x01\x02")

    reported(tmp_path, range(4, 7), 2.0, start=3)   # resumed from step 3
    assert shown(tmp_path / "logs" / "train") == {1: 1.0, 2: 1.0, 3: 1.0, 4: 2.0, 5: 2.0, 6: 2.0}
    assert shown(tmp_path / "logs" / "eval") == {4: 2.0}

    # the first run's whole file back (a bucket's older copy joined after an outage): the
    # next resume keeps each step's later value, not the first run's
    shutil.copy(before, first)
    reported(tmp_path, [], 3.0, start=6)
    assert shown(tmp_path / "logs" / "train") == {1: 1.0, 2: 1.0, 3: 1.0, 4: 2.0, 5: 2.0, 6: 2.0}
