"""`tfyard bench`: the commands run the real loop and pipeline and report the promised fields.

No timing assertions: only that the figures exist, are positive and describe the run asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfyard.bench.flops import forward_flops
from tfyard.bench.train import steady_windows
from tfyard.cli import build_parser, main
from tfyard.cli.bench import member_args
from tfyard.dtypes import DTYPES
from tfyard.errors import UserError
from tfyard.models import create_model

TINY = ["--model", "cifar_resnet8", "--image_size", "16", "--steps", "4",
        "--warmup_steps", "2", "--steps_per_loop", "2"]


def run_json(capsys, *argv) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def jpeg_records(tmp_path_factory):
    """ImageNet-named shards (two train, one validation) of JPEGs, by tfyard's converter."""
    from tfyard.data.convert import Item, write_shard

    root = tmp_path_factory.mktemp("imagenet")
    rng = np.random.RandomState(0)
    for name in ("train-00000-of-00002", "train-00001-of-00002", "validation-00000-of-00001"):
        items = [Item(int(rng.randint(1, 1001)), "class", pixels=rng.randint(
            0, 256, (40, 48, 3)).astype(np.uint8), pixel_format="JPEG") for _ in range(12)]
        write_shard(str(root / name), items)
    return str(root)


def test_train_json_has_the_figures(capsys):
    result = run_json(capsys, "bench", "train", *TINY, "--batch_size", "8", "--dtype", "auto",
                      "--json")
    assert result["dtype"] in DTYPES and result["dtype_reason"].startswith("auto: ")
    assert result["flops_per_step"] == 3 * 8 * forward_flops(
        create_model("cifar_resnet8", 10, (16, 16, 3)))
    assert result["achieved_flops_per_sec"] == pytest.approx(
        result["flops_per_step"] * result["images_per_sec"] / 8)
    assert "core(s) x" in result["peak_how"] and "3 x forward" in result["flops_how"]
    assert result["peak_fraction"] == pytest.approx(
        result["achieved_flops_per_sec"] / result["peak_flops_per_sec"])
    assert result["model"] == "cifar_resnet8"
    assert result["data"] == "synthetic_cifar10" and result["image_size"] == 16
    assert result["global_batch"] == 8 and result["strategy"] == "one_device"
    assert (result["warmup_steps"], result["timed_steps"], result["windows"]) == (2, 4, 2)
    assert len(result["window_images_per_sec"]) == 2
    assert result["images_per_sec"] == pytest.approx(np.median(result["window_images_per_sec"]))
    assert result["step_time_ms"] == pytest.approx(1000 * 8 / result["images_per_sec"])
    assert result["peak_memory_bytes"] > 50 * 2**20
    assert result["peak_memory_of"] == "host RSS (no GPU)"


def test_train_prints_rate_step_time_and_memory(capsys):
    assert main(["bench", "train", *TINY, "--batch_size", "4", "--dtype", "bfloat16",
                 "--no_jit_compile"]) == 0
    out = capsys.readouterr().out
    assert "cifar_resnet8 on synthetic_cifar10 16px, bfloat16 (as --dtype asked), XLA off" in out
    for label in ("images/sec", "step time", "peak memory", "2 warm-up steps excluded",
                  "FLOPs/step", "GFLOP/s peak ("):
        assert label in out


def test_train_and_data_on_jpeg_tfrecords_write_nothing_where_they_run(
        capsys, jpeg_records, tmp_path, monkeypatch):
    here, work = tmp_path / "cwd", tmp_path / "work"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.delenv("TFYARD_WORK_DIR", raising=False)
    monkeypatch.delenv("TFYARD_OUTPUT_DIR", raising=False)
    trained = run_json(capsys, "bench", "train", *TINY, "--batch_size", "4", "--no_jit_compile",
                       "--data", jpeg_records, "--dataset", "imagenet", "--json")
    assert trained["data"] == jpeg_records and trained["images_per_sec"] > 0
    data = run_json(capsys, "bench", "data", "--dataset", "imagenet", "--data_dir",
                    jpeg_records, "--batch_size", "4", "--image_size", "32", "--windows", "3",
                    "--window_batches", "2", "--warmup_batches", "1", "--json")
    assert (data["dataset"], data["batch_size"], data["image_size"]) == ("imagenet", 4, 32)
    assert data["windows"] == 3 and data["images_per_sec"] > 0
    assert os.listdir(here) == []   # no output/work/tfrecord_counts.json
    run_json(capsys, "bench", "train", *TINY, "--batch_size", "4", "--no_jit_compile", "--data",
             jpeg_records, "--dataset", "imagenet", "--work_dir", str(work), "--json")
    assert os.listdir(here) == [] and os.listdir(work) == ["tfrecord_counts.json"]


def test_train_follows_the_model_family(capsys):
    """No --dataset, no --image_size: an MNIST model is benched on MNIST-shaped batches."""
    result = run_json(capsys, "bench", "train", "--model", "mnist_mlp", "--steps", "2",
                      "--warmup_steps", "1", "--steps_per_loop", "1", "--batch_size", "4",
                      "--json")
    assert result["data"] == "synthetic_mnist" and result["image_size"] == 28


@pytest.mark.parametrize("argv, says", [
    (["--model", "cifar_resnet20", "--dataset", "imagenet"],
     "cifar_resnet20 takes 32x32 images but imagenet holds 224x224"),
    (["--model", "resnet50", "--dataset", "cifar10"],
     "resnet50 takes 224x224 images but cifar10 holds 32x32"),
    (["--model", "cifar_resnet20", "--dataset", "digits"],
     "no synthetic data is shaped like digits"),
])
def test_train_refuses_a_dataset_the_model_does_not_fit(capsys, argv, says):
    assert main(["bench", "train", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_data_on_a_missing_directory_is_a_user_error(capsys, tmp_path):
    assert main(["bench", "data", "--data_dir", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tfyard: error:") and len(err.splitlines()) == 1


def test_scaling_beyond_the_cores_is_a_user_error(capsys):
    cores = len(os.sched_getaffinity(0))
    assert main(["bench", "scaling", "--max_gpus", str(cores + 1)]) == 2
    err = capsys.readouterr().err
    assert f"only {cores} core(s)" in err and f"--max_gpus {cores} or less" in err


def test_scaling_members_get_the_same_run_flags():
    parser = build_parser()
    args = parser.parse_args(["bench", "scaling", "--max_gpus", "2", *TINY, "--dtype",
                              "bfloat16", "--xla", "--per_replica_batch_size", "16",
                              "--work_dir", "/scratch/counts"])
    member = parser.parse_args(["bench", "train", *member_args(args)])
    shared = ("model", "data", "dataset", "image_size", "dtype", "jit_compile", "steps",
              "warmup_steps", "steps_per_loop", "data_threads", "work_dir")
    assert {k: getattr(member, k) for k in shared} == {k: getattr(args, k) for k in shared}
    assert member.per_replica_batch_size == 16 and member.batch_size is None


def test_steady_windows_drop_the_warm_up():
    assert steady_windows([1.0, 50.0, 10.0, 30.0, 20.0], 2) == [10.0, 30.0, 20.0]
    with pytest.raises(UserError):
        steady_windows([1.0, 2.0], 2)


@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"], ["bench", "train", "--help"]])
def test_help_does_not_import_tensorflow(argv):
    """The start-up target (`tfyard --help` under 0.5 s) rests on this."""
    code = ("import sys; from tfyard.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.cluster
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPU cores")
def test_scaling_on_two_pinned_cpu_workers(capsys):
    result = run_json(capsys, "bench", "scaling", *TINY, "--per_replica_batch_size", "4",
                      "--max_gpus", "2", "--no_jit_compile", "--json")
    assert result["device"].startswith("CPU core")
    one, two = result["rows"]
    assert (one["devices"], one["strategy"], one["global_batch"]) == (1, "one_device", 4)
    assert (two["devices"], two["strategy"], two["global_batch"]) == (
        2, "multi_worker_mirrored", 8)
    assert one["efficiency"] == 1.0
    assert two["efficiency"] == pytest.approx(two["images_per_sec"] / (2 * one["images_per_sec"]))
