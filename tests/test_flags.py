"""tfyard.flags: one-line usage errors and the rewrites classic command lines need."""

from __future__ import annotations

import pytest

from tfyard.flags import Parser, absl_booleans, join_dash_values, rename_flags


def test_a_usage_error_is_one_line_and_exit_status_2(capsys):
    parser = Parser(prog="tool")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--n", "x"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == \
        "tool: error: argument --n: invalid int value: 'x' (see `tool --help`)\n"


@pytest.mark.parametrize("given, meant", [
    ("--lr", "--learning_rate"),        # the initials of its words
    ("--learnin_rate", "--learning_rate"),   # a typo
    ("--top", "--top_k"),               # the start of one, underscores before dashes
])
def test_no_abbreviation_is_taken_and_an_unknown_option_names_the_likely_one(capsys, given,
                                                                              meant):
    parser = Parser(prog="tool")
    for option in ("--learning_rate", "--lr_schedule", ("--top-k", "--top_k")):
        parser.add_argument(*(option if isinstance(option, tuple) else (option,)))
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args([given, "1"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (f"tool: error: unrecognized arguments: {given} 1 "
                                       f"(did you mean {meant}?) (see `tool --help`)\n")


def test_values_that_start_with_a_dash_are_kept_with_their_option():
    parser = Parser(prog="tool")
    parser.dash_values = frozenset({"--train_params"})
    parser.add_argument("--train_params")
    assert parser.parse_args(["--train_params", "--batch_size=64"]).train_params == \
        "--batch_size=64"
    assert join_dash_values(["--p", "-x", "--", "--p", "-y"], {"--p"}) == \
        ["--p=-x", "--", "--p", "-y"]


def test_rename_flags_rewrites_names_in_both_value_forms():
    renames = {"--train_dir": "--output_dir"}
    assert rename_flags(["--train_dir=/o", "--train_dir", "/p", "--train_dirx=1"], renames) == \
        ["--output_dir=/o", "--output_dir", "/p", "--train_dirx=1"]


def test_absl_booleans_become_switches():
    names = ("--fine_tune",)
    assert absl_booleans(["--fine_tune=True", "--x=1"], names) == ["--fine_tune", "--x=1"]
    assert absl_booleans(["--fine_tune=false", "--y"], names) == ["--y"]
    assert absl_booleans(["--nofine_tune", "--fine_tune"], names) == ["--fine_tune"]
