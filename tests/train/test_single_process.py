"""Real training in one process: learning, outputs, resume, export, evaluate, plot.

The CLI runs in this process (`tfyard.cli.main`) except on two CPU replicas, which need a
process whose TensorFlow has not started."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import run_here, run_tfyard
from tests.train.conftest import FAST, assert_learned, main_here, read_json, read_jsonl, train


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, digits_work):
    """One short run that every test in this module inspects."""
    out = tmp_path_factory.mktemp("run")
    main_here("train", *FAST, "--output_dir", out, "--work_dir", digits_work, "--train_steps",
              "60", "--eval_every_epochs", "1", "--checkpoint_every_steps", "20")
    return out


def test_loss_falls_and_accuracy_beats_chance(finished_run):
    assert_learned(finished_run)
    summary = read_json(finished_run / "summary.json")
    assert summary["final_step"] == 60 and summary["resumed_from_step"] == 0
    assert summary["strategy"] == "one_device" and summary["replicas"] == 1


def test_every_output_exists_and_parses(finished_run):
    records = read_jsonl(finished_run / "metrics.jsonl")
    for record in records:
        assert {"step", "epoch", "loss", "top1", "top5"} <= set(record)
    train_keys = {"lr", "images_per_sec", "step_time"}
    assert all(train_keys <= set(r) for r in records if r["kind"] == "train")
    assert [r["step"] for r in records if r["kind"] == "eval"] == [46, 60]
    summary = read_json(finished_run / "summary.json")
    assert summary["mean_images_per_sec"] > 0 and summary["global_batch"] == 32
    checkpoints = sorted(p.name for p in (finished_run / "checkpoints").glob("*.index"))
    assert checkpoints == ["ckpt-40.index", "ckpt-46.index", "ckpt-60.index"]
    for name in ("train", "eval"):
        assert list((finished_run / "logs" / name).glob("events.out.tfevents.*"))
    export = finished_run / "export"
    assert (export / "saved_model" / "saved_model.pb").exists()
    assert (export / "model.keras").exists() and (export / "model.h5").exists()


def test_exports_reload_with_the_same_predictions(finished_run):
    import keras
    import tensorflow as tf

    images = np.random.default_rng(0).normal(size=(4, 16, 16, 3)).astype("float32")
    native = keras.models.load_model(finished_run / "export" / "model.keras")
    logits = native(images, training=False).numpy()
    h5 = keras.models.load_model(finished_run / "export" / "model.h5", compile=False)
    np.testing.assert_allclose(h5(images, training=False).numpy(), logits, atol=1e-5)
    served = tf.saved_model.load(str(finished_run / "export" / "saved_model"))
    result = served.serve(tf.constant(images))
    np.testing.assert_allclose(result["probabilities"].numpy(),
                               tf.nn.softmax(logits).numpy(), atol=1e-5)
    np.testing.assert_array_equal(result["classes"].numpy(), logits.argmax(-1))


def test_evaluate_command_matches_the_run(finished_run, capsys):
    import json

    result = run_here(capsys, "evaluate", "--output_dir", finished_run)
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads(result.stdout)
    summary = read_json(finished_run / "summary.json")
    assert metrics["top1"] == pytest.approx(summary["eval"]["top1"], abs=1e-6)
    exported = json.loads(run_here(capsys, "evaluate", "--output_dir", finished_run,
                                   "--export").stdout)
    assert exported["top1"] == pytest.approx(metrics["top1"], abs=1e-6)


def test_plot_writes_curves(finished_run, capsys):
    result = run_here(capsys, "plot", "--output_dir", finished_run)
    assert result.returncode == 0, result.stderr[-2000:]
    png = (finished_run / "curves.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_mirrored_over_two_logical_cpus(tmp_path, digits_work):
    train(tmp_path, digits_work, "--train_steps", "50", "--ds", "mirrored",
          "--cpu_replicas", "2", "--no_export", "--eval_every_epochs", "100")
    summary = read_json(tmp_path / "summary.json")
    assert summary["strategy"] == "mirrored" and summary["replicas"] == 2
    assert summary["per_replica_batch"] == 16
    assert_learned(tmp_path)


@pytest.mark.parametrize("flags, fragment", [
    (["--model", "resnet_999"], "unknown model"),
    (["--dataset", "imagenette"], "unknown dataset"),
    (["--batch_size", "33", "--ds", "mirrored", "--cpu_replicas", "2"], "does not divide"),
    (["--ds", "parameter_server"], "needs ps tasks"),
    (["--data_dir", "/nonexistent/tfyard"], "does not exist"),
    (["--eval_every_steps", "5", "--eval_every_epochs", "1"], "not both"),
])
def test_bad_training_input_is_one_line(tmp_path, capfd, flags, fragment):
    """Here, but two CPU replicas in a fresh process (this one's TensorFlow has started)."""
    argv = ["train", "--train_steps", "1", "--output_dir", tmp_path, "--quiet", "--num_gpus",
            "0", *flags]
    result = run_tfyard(*argv) if "--cpu_replicas" in flags else run_here(capfd, *argv)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("tfyard: error:") and fragment in last
    assert "Traceback" not in result.stderr


def test_a_refused_start_leaves_no_folder_it_made(tmp_path, capfd):
    (tmp_path / "empty").mkdir()
    (tmp_path / "kept").mkdir()
    for out in (tmp_path / "runs" / "first", tmp_path / "kept"):
        result = run_here(capfd, "train", "--dataset", "imagenet", "--data_dir",
                          tmp_path / "empty", "--output_dir", out, "--num_gpus", "0", "--quiet")
        assert result.returncode == 2 and "no train shards" in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "kept"]
    assert list((tmp_path / "kept").iterdir()) == []   # no logs/, no work/


def test_eval_every_steps_evaluates_at_those_steps(tmp_path, digits_work):
    """tune spaces a step budget's evaluations with it."""
    main_here("train", *FAST, "--image_size", "8", "--output_dir", tmp_path, "--work_dir",
              digits_work, "--train_steps", "20", "--eval_every_steps", "5", "--no_export")
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["kind"] == "eval"]
    assert [r["step"] for r in records] == [5, 10, 15, 20]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_trains(tmp_path, digits_work, dtype):
    """At the digits' own 8x8: float16 steps on a CPU are slow (40 steps at 16x16 cost
    ~40 CPU-s), and at 8x8 the loss falls within 20 steps."""
    main_here("train", *FAST, "--image_size", "8", "--output_dir", tmp_path, "--work_dir",
              digits_work, "--train_steps", "20", "--dtype", dtype, "--no_export",
              "--eval_every_epochs", "100")
    summary = read_json(tmp_path / "summary.json")
    assert summary["dtype"] == dtype and summary["final_step"] == 20
    records = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert all(np.isfinite(r["loss"]) for r in records)
    assert records[-1]["loss"] < records[0]["loss"]


def test_auto_dtype_on_a_resume_is_the_one_run_json_recorded(tmp_path, digits_work, capsys):
    """A run started in float16 and resumed with --dtype auto goes on in float16, whatever
    this machine would pick: its first line says so, and run.json keeps why."""
    flags = [*[flag for flag in FAST if flag != "--quiet"], "--image_size", "8", "--output_dir",
             tmp_path, "--work_dir", digits_work, "--no_export", "--eval_every_epochs", "100"]
    main_here("train", *flags, "--train_steps", "5", "--dtype", "float16")
    assert read_json(tmp_path / "run.json")["dtype_reason"] == "as --dtype asked"
    capsys.readouterr()
    main_here("train", *flags, "--train_steps", "10", "--dtype", "auto")
    first = next(line for line in capsys.readouterr().out.splitlines()
                 if line.startswith("tfyard: cifar_resnet8 on digits"))
    assert ", float16 (auto: as run.json recorded at the run's first start), " in first
    record = read_json(tmp_path / "run.json")
    assert record["dtype"] == "float16" and record["dtype_reason"].startswith("auto: as run")
    summary = read_json(tmp_path / "summary.json")
    assert (summary["dtype"], summary["resumed_from_step"], summary["final_step"]) == \
        ("float16", 5, 10)


def test_a_seeded_runs_weights_ignore_what_drew_from_pythons_random(tmp_path, digits_work,
                                                                    monkeypatch):
    """Keras draws each initializer's seed from Python's global random: a store client
    drawing from it while the task is made (a GCS upload's multipart boundary) must not
    move a seeded run's weights."""
    import random

    from tfyard.train.task import task

    def digest(out) -> str:
        main_here("train", *FAST, "--output_dir", out, "--work_dir", digits_work,
                  "--train_steps", "1", "--steps_per_loop", "1", "--no_export")
        return read_json(out / "summary.json")["weights_digest"]

    unbroken = digest(tmp_path / "plain")
    made = task.make_task

    def drawing(*args, **kwargs):
        random.random()
        return made(*args, **kwargs)

    monkeypatch.setattr(task, "make_task", drawing)
    assert digest(tmp_path / "drawn") == unbroken
