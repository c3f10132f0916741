"""What an engine's worker runs, without an engine: one load per process, and a model the
worker cannot read is one line naming the path and the worker."""

from __future__ import annotations

import dataclasses
import os
import socket

import pytest

from tfyard.predict import worker
from tfyard.predict.options import PredictOptions


def test_loaded_once_per_process_and_an_unreadable_model_names_the_worker(run, tmp_path,
                                                                          monkeypatch):
    log = tmp_path / "loads.txt"
    monkeypatch.setenv(worker.LOAD_LOG, str(log))
    job = worker.job(run, PredictOptions(top_k=2, batch_size=3))
    assert worker.predictor(job) is worker.predictor(job)
    assert log.read_text().split() == [socket.gethostname(), str(os.getpid()), job.saved_model]

    gone = dataclasses.replace(job, saved_model=str(tmp_path / "gone"))
    with pytest.raises(RuntimeError) as raised:
        worker.predictor(gone)
    error = str(worker.driver_error(RuntimeError(f"Traceback ...\n{raised.value}\n  more")))
    assert error.startswith(f"the model {tmp_path / 'gone'} cannot be read on worker "
                            f"{socket.gethostname()} (pid {os.getpid()})")
    assert "\n" not in error


def test_a_worker_uses_the_threads_its_engine_gives_it(run):
    from tests.conftest import python_prints

    saved_model = worker.job(run, PredictOptions()).saved_model
    code = ("import tensorflow as tf; from tfyard.predict import worker; "
            f"worker.predictor(worker.Job({saved_model!r}, threads=1)); "
            "print(tf.config.threading.get_intra_op_parallelism_threads(), "
            "tf.config.threading.get_inter_op_parallelism_threads())")
    assert python_prints(code) == "1 1"


def test_refusals_and_load_errors_are_marked_for_the_driver(old_export, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "saved_model.pb").write_bytes(b"not a graph")
    for model, words in ((old_export, "was exported by a tfyard without prediction support"),
                         (broken, f"the model {broken} cannot be loaded on worker ")):
        with pytest.raises(RuntimeError) as raised:
            worker.predictor(worker.Job(str(model)))
        error = str(worker.driver_error(RuntimeError(f"Traceback ...\n{raised.value}\n  more")))
        assert words in error and "\n" not in error
