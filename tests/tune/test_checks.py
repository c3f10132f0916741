"""Every wrong `tfyard tune` input is refused in one line, exit 2, before any trial."""

from __future__ import annotations

import pytest

from tests.conftest import run_tfyard
from tests.tune.conftest import write_space
from tfyard.cli import main
from tfyard.errors import UserError

GOOD = {"learning_rate": {"loguniform": [0.001, 1.0]}}


def _refusal(tmp_path, capsys, *argv, space=GOOD) -> str:
    """What `tfyard tune` says when it refuses: one line, status 2, no trial started."""
    command = ["tune", "--space", write_space(tmp_path, space), "--metric", "validation/top1",
               "--mode", "max", "--trials", "2", "--output_dir", str(tmp_path / "study"),
               "--epochs", "1", *argv]
    try:
        status = main(command)
    except SystemExit as exc:   # argparse's refusals
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "study" / "trials").exists()
    return err


@pytest.mark.parametrize("space, words", [
    ({"learnig_rate": {"uniform": [0.1, 0.2]}}, "learnig_rate: not a `tfyard train` option"),
    ({"learning_rate": {"uniform": [0.5, 0.1]}}, "needs lo < hi"),
    ({"weight_decay": {"loguniform": [0.0, 0.1]}}, "must stay above 0"),
    ({"label_smoothing": {"uniform": [0.0, 1.5]}}, "--label_smoothing 1.5: 1.5 must be in"),
    ({"optimizer": {"choice": ["sgd", "adam"]}}, "--optimizer adam: give one of sgd, adamw"),
    ({"nesterov": {"choice": [True, "yes"]}}, "give true or false"),
    ({"learning_rate": {"normal": [0.1, 0.2]}}, "give one of loguniform, uniform"),
    ({"batch_size": {"int": [16.5, 64]}}, "int takes two integers"),
    ({"output_dir": "elsewhere"}, "tune sets it for each trial"),
    ("learning_rate: {loguniform: [0.1\n", "not YAML or JSON at line"),
    ("- a list\n", "give a mapping of train options"),
])
def test_a_wrong_space_is_named(tmp_path, capsys, space, words):
    assert words in _refusal(tmp_path, capsys, space=space)


@pytest.mark.parametrize("argv, words", [
    (["--metric", "validation/accuracy"], "--metric validation/accuracy: not a figure"),
    (["--sampler", "grid"], "--sampler grid takes choice entries only; learning_rate"),
    (["--learning_rate", "0.1"], "learning_rate: both in --space and on the command line"),
    (["--learning_rate", "-1"], "--learning_rate"),
    (["--bogus_option", "1"], "unrecognized arguments: --bogus_option 1"),
    (["--lr", "0.05"], "--lr 0.05 (did you mean --learning_rate?)"),
    (["--work_dir", "w"], "--work_dir: tune gives each trial its own"),
    (["--data_dir", "/nonexistent/data"], "--data_dir '/nonexistent/data' does not exist"),
    (["--parallel", "999"], "run at most"),
    (["--output_dir", "s3://bucket/study"], "needs --storage URL"),
    (["--storage", "postgresql://me:s3cret@127.0.0.1:1/db"], "me:***@127.0.0.1:1"),
    (["--storage", "nosuchdb://x"], "--storage nosuchdb://x: cannot open it"),
    (["--mlflow_uri", "http://127.0.0.1:9"], "MLflow at http://127.0.0.1:9 cannot be used"),
    (["--scheduler", "pbt"], "--scheduler pbt needs --pbt_interval STEPS"),
    (["--pbt_interval", "10"], "--pbt_interval is for --scheduler pbt"),
    (["--scheduler", "pbt", "--pbt_interval", "10"], "give --trials and --parallel the same"),
    (["--workers", "2"], "--workers is for --on ray; add --on ray or drop it"),
    (["--on", "ray", "--scheduler", "pbt", "--pbt_interval", "10"],
     "give --trials and --parallel the same"),
    (["--on", "ray", "--cpus_per_member", "0"], "argument --cpus_per_member: 0 must be > 0"),
])
def test_a_wrong_command_line_is_named(tmp_path, capsys, argv, words):
    err = _refusal(tmp_path, capsys, *argv)
    assert words in err and "s3cret" not in err


def test_pbt_refuses_a_search_it_cannot_perturb(tmp_path, capsys):
    err = _refusal(tmp_path, capsys, "--scheduler", "pbt", "--pbt_interval", "10",
                   "--parallel", "2", space={"batch_size": {"choice": [32, 64]}})
    assert "pbt perturbs only learning_rate, weight_decay, momentum, label_smoothing" in err


def test_the_console_script_refuses_without_a_traceback(tmp_path):
    result = run_tfyard("tune", "--space", write_space(tmp_path, {"lr": 1}), "--metric",
                        "validation/top1", "--mode", "max", "--trials", "1",
                        "--output_dir", tmp_path / "study", "--epochs", "1")
    assert result.returncode == 2 and result.stderr.startswith("tfyard: error: --space")
    assert len(result.stderr.splitlines()) == 1


def test_help_names_every_flag():
    result = run_tfyard("tune", "--help")
    for flag in ("--space", "--metric", "--mode", "--trials", "--parallel", "--sampler",
                 "--scheduler", "--pbt_interval", "--storage", "--seed", "--timeout",
                 "--max_failures", "--on", "--address", "--workers", "--cpus_per_member",
                 "--gpus_per_member", "--output_dir", "TRAIN OPTIONS"):
        assert flag in result.stdout


SMI = """0, GPU-5e1a, 81559
1, GPU-77b2, 81559
"""


def test_trials_sharing_a_gpu_each_get_a_trials_memory_or_are_refused():
    """Round-robin over 2 GPUs of 81,559 MiB (nvidia-smi's rows): 79 trials a GPU fit,
    80 do not; each GPU is found by its index or its UUID, an unknown one is not checked."""
    from tfyard.tune.checked import gpu_shares, memory_of, refuse_starved

    memory = memory_of(["0", "GPU-77b2", "7"], SMI)
    assert memory == {"0": 81559, "GPU-77b2": 81559}
    refuse_starved(gpu_shares(["0", "GPU-77b2"], 158), memory)
    with pytest.raises(UserError, match=r"--parallel 160: 80 trials would share GPU 0's 81559 "
                       r"MiB, 1019 MiB each, under the 1024 MiB .*give --parallel 158 or fewer"):
        refuse_starved(gpu_shares(["0", "GPU-77b2"], 160), memory)
    refuse_starved(gpu_shares(["7"], 500), memory)   # its memory unknown: nothing refused


def test_without_nvidia_smi_no_gpu_memory_is_known(monkeypatch, tmp_path):
    from tfyard.tune.checked import gpu_memory_mib

    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_memory_mib(["0"]) == {}
