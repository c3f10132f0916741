"""A long run survives what long runs meet: divergence, broken checkpoints, torn run files,
and a rerun into the wrong directory. Real `tfyard train` runs on the bundled digits, through
the CLI's `main` in the test's process (none of these is about a fresh process)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_here
from tests.train.conftest import FAST, read_json, read_jsonl
from tfyard.cli import main

FLAGS = [*FAST, "--no_export", "--checkpoint_every_steps", "5"]


def tfyard_train(capsys, out: Path, work: Path, *extra):
    return run_here(capsys, "train", *FLAGS, "--output_dir", out, "--work_dir", work, *extra)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file() and "logs" not in p.parts}


def one_line_error(result) -> str:
    """The refusal: exit 2, at most 3 lines on stderr, no traceback; its last line."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(lines) <= 3 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[-1].startswith("tfyard: error: ")
    return lines[-1]


@pytest.fixture(scope="module")
def ten_steps(tmp_path_factory, digits_work) -> Path:
    """A finished 10-step run with checkpoints at steps 5 and 10; tests copy it."""
    out = tmp_path_factory.mktemp("ten-steps") / "out"
    assert main(["train", *FLAGS, "--output_dir", str(out), "--work_dir", str(digits_work),
                 "--train_steps", "10"]) == 0
    return out


@pytest.fixture
def run_dir(ten_steps, tmp_path) -> Path:
    shutil.copytree(ten_steps, tmp_path / "out")
    return tmp_path / "out"


def test_divergence_stops_at_its_step_and_never_costs_the_last_finite_checkpoint(
        run_dir, digits_work, capsys):
    checkpoints = snapshot(run_dir / "checkpoints")
    # lr 1e6 takes the loss to nan within a few steps (inf first, then nan).
    result = tfyard_train(capsys, run_dir, digits_work, "--learning_rate", "1e6",
                          "--train_steps", "30", "--keep_checkpoints", "1")
    line = one_line_error(result)
    # The step whose loss went non-finite; or, where the loss of the chunk stayed finite but
    # a weight did not, the save refused at the chunk's end.
    # (NaN gradients can come before the loss overflows.)
    found = re.match(r"tfyard: error: training diverged (at step (\d+): (loss (nan|inf)|"
                     r"non-finite gradients \(loss [-0-9.e+]+\))|by step (15): a weight is not "
                     r"finite, so it was not saved)", line)
    assert found and 11 <= int(found.group(2) or found.group(5)) <= 15, line
    assert f"(last finite checkpoint: {run_dir}/checkpoints/ckpt-10 kept)" in line
    assert snapshot(run_dir / "checkpoints") == checkpoints   # nothing saved, nothing rotated
    evaluated = run_here(capsys, "evaluate", "--output_dir", run_dir)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "ckpt-10" in evaluated.stdout



def test_skipping_non_finite_steps_skips_them_then_stops(tmp_path, digits_work, capsys):
    # From scratch at lr 1e3 the loss grows for a few finite steps, then every step is
    # non-finite; the guard checks at chunk ends (5 steps), so it stops after 10 or more.
    skipping = run_here(capsys, "train", *FAST, "--no_export", "--output_dir", tmp_path,
                        "--work_dir", digits_work, "--learning_rate", "1e3",
                        "--train_steps", "30", "--skip_nonfinite_steps", "10")
    line = one_line_error(skipping)
    found = re.match(r"tfyard: error: training diverged by step (\d+): the last (\d+) steps had "
                     r"a non-finite loss or gradients and were skipped \(--skip_nonfinite_steps "
                     r"10\)", line)
    # Fused batch norm can keep the loss and gradients finite while the moving variance
    # overflows: then nothing is skipped, and the save refuses the non-finite weight.
    refused = "training diverged by step 30: a weight is not finite, so it was not saved"
    assert (found and 10 <= int(found.group(2)) < int(found.group(1)) < 30) \
        or refused in line, line
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert found is None or any(r["skipped_steps"] > 0 for r in records), records
    assert not (tmp_path / "checkpoints" / "checkpoint").exists()   # nothing non-finite saved


def test_an_unreadable_latest_checkpoint_falls_back_and_none_readable_is_one_line(
        run_dir, digits_work, capsys):
    data = run_dir / "checkpoints" / "ckpt-10.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:1000])    # a full disk cut the copy short
    metrics = run_dir / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"kind": "train", "step": 11, "lo')  # a torn line
    resumed = tfyard_train(capsys, run_dir, digits_work, "--train_steps", "15")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    warnings = [line for line in resumed.stdout.splitlines() if "warning" in line]
    assert len(warnings) == 2 and "ckpt-10 is unreadable" in warnings[0], resumed.stdout
    assert "skipped 1 torn line(s)" in warnings[1]   # gone with the reports run again
    summary = read_json(run_dir / "summary.json")
    assert (summary["resumed_from_step"], summary["final_step"]) == (5, 15)
    steps = [r["step"] for r in read_jsonl(metrics) if r["kind"] == "train"]
    assert steps == [5, 10, 15]   # step 10 ran again: its latest report only
    plotted = run_here(capsys, "plot", "--output_dir", run_dir)
    assert plotted.returncode == 0 and (run_dir / "curves.png").exists(), plotted.stderr

    for data in (run_dir / "checkpoints").glob("*.data-*"):
        data.write_bytes(b"garbage")
    before = snapshot(run_dir)
    broken = tfyard_train(capsys, run_dir, digits_work, "--train_steps", "20")
    line = one_line_error(broken)
    assert "none of the" in line and "can be read" in line
    assert snapshot(run_dir) == before


def test_a_rerun_with_another_model_is_refused_before_anything_changes(run_dir, digits_work,
                                                                     capsys):
    before = snapshot(run_dir)
    result = tfyard_train(capsys, run_dir, digits_work, "--model", "mnist_mlp",
                          "--image_size", "28", "--train_steps", "20")
    line = one_line_error(result)
    assert line == (f"tfyard: error: output_dir {run_dir} holds a run of cifar_resnet8 on digits "
                    "(10 classes); this run is mnist_mlp on digits (10 classes): use a new "
                    "--output_dir")
    assert snapshot(run_dir) == before
