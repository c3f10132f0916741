"""The Controller (outer loop) and its actions, in-process on a toy model, as orbit's
controller_test does: real steps, real checkpoints and metrics files in tmp_path."""

from __future__ import annotations

import json
import logging

import pytest

from tests.train.toy import toy_trainer
from tfyard.train.actions import (
    CheckpointAction,
    ConsoleAction,
    EvalAction,
    ExportAction,
    MetricsAction,
)
from tfyard.train.controller import Callback, Controller, StopTraining
from tfyard.train.outside.console import Console
from tfyard.train.rundir.checkpoint import Checkpoints
from tfyard.train.rundir.report import Reporter


class Recorder(Callback):
    def __init__(self, every_steps=None):
        self.calls = []
        super().__init__(every_steps, **{hook: self._record(hook) for hook in (
            "on_start", "on_chunk_end", "on_boundary", "on_end")})

    def _record(self, hook):
        return lambda state: self.calls.append((hook, state.step))

    def steps(self, hook):
        return [step for name, step in self.calls if name == hook]


def test_hooks_run_at_chunks_epoch_ends_every_steps_and_the_end():
    recorder = Recorder(every_steps=3)
    state = Controller(toy_trainer(steps_per_loop=2), total_steps=11, steps_per_epoch=5,
                       actions=[recorder]).run()
    assert state.step == 11 and state.stop_reason is None
    assert recorder.steps("on_start") == [0] and recorder.steps("on_end") == [11]
    # Chunks of 2 steps, cut at boundaries (multiples of 5 and 3, and 11).
    assert recorder.steps("on_chunk_end") == [2, 3, 5, 6, 8, 9, 10, 11]
    assert recorder.steps("on_boundary") == [3, 5, 6, 9, 10, 11]
    assert len(state.rates) == 8 and state.metrics["loss"] > 0


def test_an_action_stops_the_run_early():
    def guard(state):
        if state.step >= 4:
            raise StopTraining("loss guard")

    recorder = Recorder()
    state = Controller(toy_trainer(), 20, 10, [Callback(on_chunk_end=guard), recorder]).run()
    assert (state.step, state.stop_reason) == (4, "loss guard")
    assert recorder.steps("on_end") == [4]       # on_end still runs
    assert recorder.steps("on_chunk_end") == [2, 4]


def test_request_stop_keeps_the_first_reason():
    def stop(state):
        state.request_stop(f"stop at {state.step}")

    state = Controller(toy_trainer(), 20, 10, [Callback(on_chunk_end=stop)]).run()
    assert (state.step, state.stop_reason) == (2, "stop at 2")


def test_close_runs_even_when_a_hook_fails():
    closed = []

    class Failing(Callback):
        def close(self):
            closed.append(True)

    def fail(state):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        Controller(toy_trainer(), 6, 6, [Failing(on_chunk_end=fail)]).run()
    assert closed == [True]


def test_every_action_closes_and_the_first_close_error_is_raised(caplog):
    closed = []

    class Closing(Callback):
        def __init__(self, name, error=None):
            super().__init__()
            self.name, self.error = name, error

        def close(self):
            closed.append(self.name)
            if self.error:
                raise self.error

    actions = [Closing("a"), Closing("b", OSError("disk full")), Closing("c", ValueError("x")),
               Closing("d")]
    with pytest.raises(OSError, match="disk full"):
        Controller(toy_trainer(), 2, 2, actions).run()
    assert closed == ["a", "b", "c", "d"]
    assert "closing Closing failed: ValueError: x" in caplog.text
    closed.clear()

    def fail(state):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):   # the run's own error wins
        Controller(toy_trainer(), 2, 2, [Callback(on_start=fail), *actions]).run()
    assert closed == ["a", "b", "c", "d"]
    assert "closing Closing failed: OSError: disk full" in caplog.text


def test_unknown_hook_is_refused():
    with pytest.raises(TypeError, match="on_step"):
        Callback(on_step=print)


def _checkpoints(tmp_path, trainer):
    return Checkpoints(str(tmp_path / "checkpoints"), True, 5, model=trainer.model,
                       optimizer=trainer.optimizer, step=trainer.step)


def test_checkpoint_action_saves_at_epoch_ends_and_a_rerun_resumes(tmp_path):
    trainer = toy_trainer()
    state = Controller(trainer, 8, 4, [CheckpointAction(_checkpoints(tmp_path, trainer), 6)]
                       ).run()
    saved = sorted(p.name for p in (tmp_path / "checkpoints").glob("ckpt-*.index"))
    assert saved == ["ckpt-4.index", "ckpt-6.index", "ckpt-8.index"]
    assert state.outputs["checkpoint"].endswith("ckpt-8")

    again = toy_trainer()
    assert _checkpoints(tmp_path, again).restore_latest().endswith("ckpt-8")
    resumed = Controller(again, 10, 4, []).run()
    assert (resumed.start_step, resumed.step) == (8, 10)
    assert again.model.get_weights()[0].tolist() != trainer.model.get_weights()[0].tolist()


@pytest.fixture
def tfyard_log(caplog):
    """Messages of the `tfyard` logger (which the CLI may have detached from the root)."""
    logger = logging.getLogger("tfyard")
    logger.addHandler(caplog.handler)
    with caplog.at_level(logging.INFO, logger="tfyard"):
        yield caplog
    logger.removeHandler(caplog.handler)


def test_metrics_console_and_eval_actions(tmp_path, tfyard_log):
    evaluations = []

    def evaluate():
        evaluations.append(True)
        return {"loss": 0.5, "top1": 0.75, "top5": 1.0}

    actions = [EvalAction(evaluate, every_steps=4),
               MetricsAction(Reporter(str(tmp_path), str(tmp_path / "logs"))),
               ConsoleAction(Console(6, 3, tty=False)),
               ExportAction(lambda: {"saved_model": "x"})]
    state = Controller(toy_trainer(), 6, 3, actions).run()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [
        ("train", 2), ("train", 3), ("train", 4), ("eval", 4), ("train", 6), ("eval", 6)]
    assert records[3]["top1"] == 0.75 and records[-2]["epoch"] == 2.0
    assert len(evaluations) == 2 and state.eval_step == 6
    assert state.outputs["export"] == {"saved_model": "x"}
    lines = tfyard_log.messages
    assert any(line.startswith("step 6/6 epoch 2.00 lr 0.1 loss") for line in lines)
    assert "eval  step 4: loss 0.5000 top1 0.7500 top5 1.0000" in lines
    assert list((tmp_path / "logs" / "train").iterdir())   # TensorBoard events


def test_a_resume_keeps_each_steps_latest_report_only(tmp_path):
    """Resumed from step 3, the reports of steps 4 and later (train and eval) run again: the
    earlier ones are dropped before the new ones are appended; a torn line goes too."""
    old = [{"kind": kind, "step": step, "time": 0.0} for kind, step in
           (("train", 2), ("train", 3), ("train", 4), ("eval", 4), ("other", 9))]
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in old) + '{"kind": "tr')
    trainer = toy_trainer()
    trainer.step.assign(3)
    actions = [EvalAction(lambda: {"loss": 0.5, "top1": 0.75, "top5": 1.0}, every_steps=4),
               MetricsAction(Reporter(str(tmp_path), str(tmp_path / "logs"), start=3))]
    Controller(trainer, 6, 3, actions).run()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"], r["time"] > 0) for r in records] == [
        ("train", 2, False), ("train", 3, False), ("other", 9, False), ("train", 4, True),
        ("eval", 4, True), ("train", 6, True), ("eval", 6, True)]


def test_a_rerun_of_a_finished_run_evaluates_once_and_records_nothing(tmp_path):
    trainer = toy_trainer()
    trainer.step.assign(6)
    actions = [EvalAction(lambda: {"loss": 0.5, "top1": 0.75, "top5": 1.0}, every_steps=4),
               MetricsAction(Reporter(str(tmp_path), str(tmp_path / "logs")))]
    state = Controller(trainer, 6, 3, actions).run()
    assert (state.eval, state.eval_step) == ({"loss": 0.5, "top1": 0.75, "top5": 1.0}, 6)
    assert not (tmp_path / "metrics.jsonl").exists() or not (
        tmp_path / "metrics.jsonl").read_text().strip()


def test_a_stopped_run_does_not_export():
    exported = []
    state = Controller(toy_trainer(), 6, 3, [
        Callback(on_chunk_end=lambda s: s.request_stop("preempted")),
        ExportAction(lambda: exported.append(True) or {})]).run()
    assert state.stop_reason == "preempted" and exported == []
