"""TrainOptions: flags generated from the fields, round trips, and checks up front."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from tfyard.cli import main
from tfyard.errors import UserError
from tfyard.train.options import TrainOptions, add_option_arguments, parse_train_args

CLASSIC = ["--model_name", "vgg_19", "--train-batch-size", "64", "--train_epochs", "2",
           "--max_number_of_steps", "7", "--ds", "mirrored", "--xla", "--decay_epochs", "1,1.5",
           "--momentum", "0.5", "--label_smoothing", "0.1", "--weight_decay", "0", "--no_export",
           "--data-dir", "/d", "--num_gpus", "0", "--seed", "4", "--quiet"]


def test_classic_spellings_parse_into_the_fields():
    options = parse_train_args(CLASSIC)
    assert (options.model, options.batch_size, options.epochs, options.train_steps) == (
        "vgg_19", 64, 2.0, 7)
    assert (options.ds, options.jit_compile, options.decay_epochs) == (
        "mirrored", True, (1.0, 1.5))
    assert (options.export, options.data_dir, options.quiet) == (False, "/d", True)


@pytest.mark.parametrize("argv", [[], CLASSIC, ["--no_xla", "--decay_epochs", "",
                                                "--resnet_size", "50", "--nesterov"]])
def test_to_argv_parses_back_to_the_same_options(argv):
    options = parse_train_args(argv)
    assert parse_train_args(options.to_argv()) == options


def test_from_dict_reads_run_json_back():
    options = parse_train_args(CLASSIC)
    as_json = {**options.to_dict(), "decay_epochs": [1.0, 1.5], "platform_only_key": 1}
    assert TrainOptions.from_dict(as_json) == options


def test_defaults_are_declared_once():
    assert TrainOptions() == parse_train_args([])
    assert TrainOptions().to_argv() == []


@pytest.mark.parametrize("flag,value,fragment", [
    ("--learning_rate", "nan", "must be a finite number"),
    ("--learning_rate", "0", "must be > 0"),
    ("--learning_rate", "inf", "must be a finite number"),
    ("--momentum", "1", "must be in [0, 1)"),
    ("--label_smoothing", "-0.1", "must be in [0, 1)"),
    ("--weight_decay", "-1e-4", "must be >= 0"),
    ("--epochs", "0", "must be > 0"),
    ("--epochs", "nan", "must be a finite number"),
    ("--batch_size", "0", "must be a positive integer"),
    ("--decay_epochs", "3,nan", "must be a finite number"),
    ("--momentum", "2", "must be in [0, 1)"),
    ("--label_smoothing", "1.5", "must be in [0, 1)"),
    ("--weight_decay", "inf", "must be a finite number"),
    ("--skip_nonfinite_steps", "-1", "must be an integer >= 0"),
])
def test_bad_numbers_exit_2_with_one_line(capsys, flag, value, fragment):
    with pytest.raises(SystemExit) as exited:
        main(["train", f"{flag}={value}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and fragment in err and flag in err


def test_the_constructor_checks_too():
    with pytest.raises(UserError, match="--momentum"):
        TrainOptions(momentum=1.5)
    assert TrainOptions(learning_rate="0.5").learning_rate == 0.5


@pytest.mark.parametrize("argv, message", [
    (["evaluate", "--output_dir", "{tmp}"], "{tmp}/run.json not found; point --output_dir at "
     "a directory written by `tfyard train`"),
    (["train", "--model", "mnist_cnn", "--image_size", "16", "--output_dir", "{tmp}"],
     "mnist_cnn needs images of at least 28x28, got 16x16; pass --image_size 28 or more"),
])
def test_user_errors_answer_without_tensorflow(tmp_path, argv, message):
    argv = [a.format(tmp=tmp_path) for a in argv]
    code = ("import sys; from tfyard.cli import main\n"
            f"code = main({argv!r})\n"
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
            "sys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"tfyard: error: {message.format(tmp=tmp_path)}"]


def test_evaluate_before_the_first_checkpoint_is_one_line(tmp_path, capsys):
    (tmp_path / "run.json").write_text("{}")
    assert main(["evaluate", "--output_dir", str(tmp_path)]) == 2
    assert "no checkpoint in" in capsys.readouterr().err


def test_every_option_belongs_to_one_part_of_the_split():
    """What every run has, the optimisation recipe, the classification fields: each field of
    TrainOptions is declared in exactly one of them."""
    from dataclasses import fields

    from tfyard.train.options import ClassificationOptions, RecipeOptions, RunOptions

    parts = [{f.name for f in fields(part)}
             for part in (RunOptions, RecipeOptions, ClassificationOptions)]
    assert sum(len(p) for p in parts) == len(fields(TrainOptions))
    assert set().union(*parts) == {f.name for f in fields(TrainOptions)}
    assert TrainOptions(learning_rate=0.3, momentum=0.8).recipe_changes() == [
        "learning_rate", "momentum"]


def test_a_commands_default_replaces_the_fields_default_in_the_help():
    parser = add_option_arguments(argparse.ArgumentParser(), ["steps_per_loop"],
                                  defaults={"steps_per_loop": 20})
    text = " ".join(parser.format_help().split())
    assert text.count("(default: ") == 1 and "(default: 20)" in text
    text = " ".join(add_option_arguments(argparse.ArgumentParser(), ["steps_per_loop"])
                    .format_help().split())
    assert text.count("(default: ") == 1 and "(default: 10)" in text
