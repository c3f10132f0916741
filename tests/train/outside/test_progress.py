"""What a run shows while it trains: a rich progress display on a terminal (a real pty),
one plain line per report off it, the input-wait share of every report with its one-time
hint, and `--profile_steps` traces. The runs go through the CLI's `main` in the test's
process, its sys.stdout and sys.stderr a real pty where a terminal is the point."""

from __future__ import annotations

import fcntl
import logging
import os
import pty
import re
import struct
import sys
import termios
import threading
import time

import pytest
import tensorflow as tf

from tests.conftest import run_here
from tests.train.conftest import read_jsonl
from tests.train.toy import BATCH, dataset_fn, toy_trainer
from tfyard.cli import main
from tfyard.train.actions import ConsoleAction, MetricsAction
from tfyard.train.controller import Callback, Controller
from tfyard.train.outside.console import Console
from tfyard.train.rundir.report import Reporter

# 11 steps per epoch at batch 128 on digits: 14 steps are two epochs, each evaluated.
RUN = ["--model", "cifar_resnet8", "--dataset", "digits", "--image_size", "8",
       "--batch_size", "128", "--learning_rate", "0.05", "--num_gpus", "0", "--seed", "3",
       "--steps_per_loop", "5", "--train_steps", "14", "--eval_every_epochs", "1",
       "--no_export", "--no_jit_compile"]
PLAIN = re.compile(r"step \d+/14 epoch \d\.\d\d lr \S+ loss \d+\.\d{4} top1 \d\.\d{4} "
                   r"\d+ img/s wait \d+%")
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run_on_a_terminal(monkeypatch, *args) -> tuple[int, str]:
    """`tfyard ARGS` in this process with a pseudo-terminal (160x40) as sys.stdout and
    sys.stderr; returns the exit status and everything written to it, escape sequences
    included."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    for name, value in (("TERM", "xterm-256color"), ("COLUMNS", "160"), ("LINES", "40")):
        monkeypatch.setenv(name, value)
    output = bytearray()

    def read():   # drained as it is written, so a full terminal never blocks the run
        while True:
            try:
                data = os.read(controller, 65536)
            except OSError:   # EIO: the writer has closed the terminal
                return
            if not data:
                return
            output.extend(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stream = open(terminal, "w", encoding="utf-8", errors="replace")
    try:
        with monkeypatch.context() as patched:
            patched.setattr(sys, "stdout", stream)
            patched.setattr(sys, "stderr", stream)
            code = main([str(arg) for arg in args])
    finally:
        stream.close()
        reader.join(timeout=60)
        os.close(controller)
    return code, output.decode()


def test_a_terminal_shows_the_live_display_per_epoch(tmp_path, digits_work, monkeypatch):
    out = tmp_path / "run"
    code, output = run_on_a_terminal(monkeypatch, "train", *RUN, "--output_dir", out,
                                     "--work_dir", digits_work)
    assert code == 0, output[-3000:]
    assert "\x1b[" in output                                # rich drew on the terminal
    text = ESCAPE.sub("", output).replace("\r", "\n")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # The last drawing of each epoch's display: bar, step within the epoch, elapsed, ETA,
    # images/sec, loss, accuracy and input wait.
    shown = re.compile(r"epoch (\d)/2 ━+ +(\d+)/(\d+) \d:\d\d:\d\d ETA \d:\d\d:\d\d loss "
                       r"\d+\.\d{4} top1 \d\.\d{4} \d+ img/s wait \d+% run ETA")
    finished = [m.groups() for m in map(shown.match, lines) if m and m[2] == m[3]]
    assert sorted(set(finished)) == [("1", "11", "11"), ("2", "3", "3")]
    evals = [i for i, line in enumerate(lines) if line.startswith("eval  step")]
    assert [lines[i].split(":")[0] for i in evals] == ["eval  step 11", "eval  step 14"]
    assert not any(PLAIN.search(line) for line in lines)   # no plain report lines here
    assert lines[-1].startswith("tfyard: done at step 14")


def test_off_a_terminal_each_report_is_one_plain_line(tmp_path, digits_work, capsys):
    out = tmp_path / "run"
    code = main(list(map(str, ["train", *RUN, "--output_dir", out, "--work_dir", digits_work])))
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr[-3000:]
    assert not sys.stdout.isatty()   # pytest's capture: not a terminal
    assert "\x1b" not in stdout and "━" not in stdout
    reports = [line for line in stdout.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in reports] == ["5/14", "10/14", "11/14", "14/14"]
    assert all(PLAIN.fullmatch(line) for line in reports), reports
    assert "eval  step 11: loss" in stdout and "hint" not in stdout
    # A normal run is not input-bound: the share is in every report, and small.
    train = [r for r in read_jsonl(out / "metrics.jsonl") if r["kind"] == "train"]
    waits = [r["input_wait"] for r in train]
    assert len(waits) == 4 and all(0.0 <= w <= 1.0 for w in waits)
    assert max(waits[1:]) < 0.5, waits   # the hint's threshold: measured 1-4% here


def test_quiet_shows_neither_and_profile_steps_writes_a_trace(tmp_path, digits_work,
                                                              monkeypatch, capfd):
    out = tmp_path / "run"
    code, output = run_on_a_terminal(monkeypatch, "train", *RUN, "--quiet", "--profile_steps",
                                     "3,6", "--output_dir", out, "--work_dir", digits_work)
    assert code == 0, output[-3000:]
    assert output.strip() == "", output[-3000:]
    written = capfd.readouterr()   # nothing past sys.stdout either (TensorFlow's own logs)
    assert written.out.strip() == written.err.strip() == "", written
    traces = list((out / "logs" / "train").glob("plugins/profile/*/*.xplane.pb"))
    assert len(traces) == 1 and traces[0].stat().st_size > 1000
    # The trace cut the chunks at steps 2 and 6; the reports say so.
    steps = [r["step"] for r in read_jsonl(out / "metrics.jsonl") if r["kind"] == "train"]
    assert steps[:3] == [2, 6, 11]


def test_profile_steps_past_the_runs_end_say_so_in_one_line(tmp_path, digits_work, capsys):
    """Issue 67: a trace of steps the run never reaches was no trace and no word."""
    out = tmp_path / "run"
    result = run_here(capsys, "train", *RUN, "--quiet", "--profile_steps", "20,30",
                      "--output_dir", out, "--work_dir", digits_work)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines() == [   # --quiet: warnings only
        "tfyard: --profile_steps 20,30: no trace (the run ends at step 14)"], result.stdout
    assert not (out / "logs" / "train" / "plugins").exists()


@pytest.mark.parametrize("value", ["6,3", "4", "0,2"])
def test_profile_steps_must_be_a_range(capsys, value):
    with pytest.raises(SystemExit) as exited:
        main(["train", f"--profile_steps={value}"])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1 and "A,B" in err


def test_chunks_end_at_an_actions_chunk_ends_without_a_boundary():
    calls = []
    cuts = Callback(on_chunk_end=lambda s: calls.append(("chunk", s.step)),
                    on_boundary=lambda s: calls.append(("boundary", s.step)))
    cuts.chunk_ends = (3, 5)
    Controller(toy_trainer(steps_per_loop=4), 12, 6, [cuts]).run()
    assert [s for kind, s in calls if kind == "chunk"] == [3, 5, 6, 10, 12]
    assert [s for kind, s in calls if kind == "boundary"] == [6, 12]


def slow_dataset_fn(context, seed_offset):
    """The toy batches, each held back 50 ms by a Python sleep: input-bound by design."""

    def sleep(images):
        time.sleep(0.05)
        return images

    def slow(images, labels):
        images = tf.py_function(sleep, [images], tf.float32)
        return tf.ensure_shape(images, [context.get_per_replica_batch_size(BATCH), 4]), labels

    return dataset_fn(context, seed_offset).map(slow)


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def tfyard_log():
    """Each message of the `tfyard` logger, once."""
    logger, lines = logging.getLogger("tfyard"), Lines()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield lines
    logger.removeHandler(lines)
    logger.setLevel(level)
    logger.propagate = propagate


def test_a_slow_input_shows_a_high_wait_and_one_hint(tmp_path, tfyard_log):
    trainer = toy_trainer(steps_per_loop=2)
    trainer.dataset_fn = slow_dataset_fn
    waits = []
    Controller(trainer, 16, 8, [
        MetricsAction(Reporter(str(tmp_path), str(tmp_path / "logs"))),
        ConsoleAction(Console(16, 8, tty=False)),
        Callback(on_chunk_end=lambda s: waits.append((s.input_wait_seconds, s.chunk_seconds)))
    ]).run()
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    # Once the batches prefetched during tracing are used up, nearly all is waiting (two
    # 50 ms batches a chunk; the pipeline runs ahead while the host writes the reports).
    assert len(records) == 8 and min(r["input_wait"] for r in records[-4:]) > 0.8
    assert len(waits) == 8 and all(0.04 < waited <= took for waited, took in waits[-4:])
    lines = tfyard_log.messages
    assert sum(" wait 9" in line or " wait 100%" in line for line in lines) >= 4
    hints = [line for line in lines if "hint" in line]
    assert len(hints) == 1 and "--data_threads" in hints[0] and "models#3780" in hints[0]
    # The hint comes after warm-up, once a few reports agree.
    assert lines.index(hints[0]) > [i for i, x in enumerate(lines) if "step 8/" in x][0]
    assert list((tmp_path / "logs" / "train").glob("events.out.tfevents.*"))
