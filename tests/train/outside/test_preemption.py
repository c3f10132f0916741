"""PreemptionAction in-process on the toy model: a SIGTERM during a chunk stops the run after
that chunk and saves there, a real signal sets the flag, and a rerun resumes at that step."""

from __future__ import annotations

import os
import signal

import pytest
import tensorflow as tf

from tests.train.toy import toy_trainer
from tfyard.errors import PAUSED, PREEMPTED
from tfyard.train.actions import CheckpointAction, PreemptionAction
from tfyard.train.controller import Callback, Controller
from tfyard.train.outside import preemption
from tfyard.train.rundir.checkpoint import Checkpoints


def controller(directory, signal_at=None, every=10, pause_at=None):
    trainer = toy_trainer(steps_per_loop=2)
    checkpoints = Checkpoints(str(directory), True, 5, model=trainer.model,
                              optimizer=trainer.optimizer, step=trainer.step)
    restored = checkpoints.restore_latest()
    flag = {"set": False}

    def chunk_end(state):  # runs before the action: as if SIGTERM came during this chunk
        flag["set"] = flag["set"] or state.step == signal_at

    actions = [Callback(on_chunk_end=chunk_end), CheckpointAction(checkpoints, every),
               PreemptionAction(tf.distribute.get_strategy(), checkpoints,
                                trainer.synchronize, flag=lambda: flag["set"],
                                pause_at=pause_at)]
    return Controller(trainer, 20, 100, actions), restored


def test_preempted_mid_interval_saves_at_that_step_and_the_rerun_resumes_there(tmp_path):
    state = controller(tmp_path, signal_at=6)[0].run()
    assert (state.step, state.stop_reason) == (6, PREEMPTED)
    assert state.outputs["checkpoint"].endswith("ckpt-6")
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-6")
    rerun, restored = controller(tmp_path)
    assert restored.endswith("ckpt-6") and rerun.state.start_step == 6  # 0 steps lost
    state = rerun.run()
    assert (state.step, state.stop_reason) == (20, None)


def test_preempted_at_a_boundary_saves_once(tmp_path):
    state = controller(tmp_path, signal_at=10)[0].run()
    assert (state.step, state.stop_reason) == (10, PREEMPTED)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.index")) == ["ckpt-10.index"]


def test_a_pause_stops_at_its_step_mid_chunk_and_at_once_on_a_rerun_there(tmp_path):
    """--pause_at_step (tune's PBT): a stop as a preemption's (saved there), at the step asked,
    told apart from one (launchers restart a preempted job, not a paused one). A rerun
    there saves nothing again: the same names rewritten would, in a bucket, not be at once."""
    for pause_at, start in ((7, 0), (7, 7), (13, 7)):   # chunks of 2 steps: 7 cuts one
        kept = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob(f"ckpt-{start}.*")}
        run, _ = controller(tmp_path, pause_at=pause_at)
        state = run.run()
        assert (run.state.start_step, state.step, state.stop_reason) == (start, pause_at,
                                                                          PAUSED)
        assert tf.train.latest_checkpoint(str(tmp_path)).endswith(f"ckpt-{pause_at}")
        assert state.outputs["checkpoint"].endswith(f"ckpt-{pause_at}")
        if start == pause_at:
            assert kept and kept == {p.name: p.stat().st_mtime_ns
                                     for p in tmp_path.glob(f"ckpt-{start}.*")}


def test_a_signal_at_the_last_chunk_is_a_finished_run(tmp_path):
    state = controller(tmp_path, signal_at=20)[0].run()
    assert (state.step, state.stop_reason) == (20, None)


@pytest.fixture
def handler():
    previous = signal.getsignal(signal.SIGTERM)
    preemption.reset()
    preemption.install()
    yield
    signal.signal(signal.SIGTERM, previous)
    preemption.reset()


def test_sigterm_only_sets_the_flag_and_exit_says_143(handler, caplog):
    assert not preemption.requested()
    os.kill(os.getpid(), signal.SIGTERM)
    assert preemption.requested()  # and the process is still here
    with pytest.raises(SystemExit) as exited:
        preemption.exit_preempted(7)
    assert exited.value.code == 143
    assert caplog.messages == ["tfyard: preempted at step 7; saved checkpoint ckpt-7; rerun "
                               "to resume (exit 143)"]
