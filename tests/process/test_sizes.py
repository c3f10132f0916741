"""Sizes a user gives: decimal and binary units apart, one line for anything else, from the
flag and from the environment alike."""

from __future__ import annotations

import pytest

from tfyard.errors import UserError
from tfyard.process.envvars import size
from tfyard.process.sizes import at_least, byte_size, shown
from tfyard.train.options import TrainOptions


def test_decimal_and_binary_units_are_told_apart():
    assert byte_size("500MB") == 500 * 10**6 and byte_size("500MiB") == 500 * 2**20
    assert byte_size(" 1.5 gib ") == 3 * 2**29 and byte_size("2TB") == 2 * 10**12
    assert byte_size("4096") == byte_size(4096) == 4096
    assert shown(1_500_000_000) == "1.5 GB" and shown(999) == "999 B"


def test_a_size_a_fix_names_is_rounded_up_and_taken_by_the_flag():
    for bytes_ in (1, 999, 1000, 24_100_001, 24_000_000, 150 * 2**20, 5 * 10**12 + 1):
        assert bytes_ <= byte_size(at_least(bytes_)) < bytes_ * 1.01 + 1, at_least(bytes_)
    assert at_least(24_100_001) == "24.2MB" and at_least(999) == "999B"


@pytest.mark.parametrize("text", ["5XB", "MB", "-1MB", "0", "0.1B", "1e6"])
def test_anything_else_is_one_line_naming_the_units(text):
    with pytest.raises(ValueError, match="500MB"):
        byte_size(text)
    with pytest.raises(UserError) as caught:
        size("TFYARD_DATA_CACHE_LIMIT", {"TFYARD_DATA_CACHE_LIMIT": text})
    assert str(caught.value).startswith("TFYARD_DATA_CACHE_LIMIT=") and "\n" not in str(
        caught.value)
    with pytest.raises(UserError, match="^--data_cache_limit"):
        TrainOptions(data_cache_limit=text)


def test_the_environment_and_the_flag_give_bytes():
    assert size("L", {"L": "2GiB"}) == 2 * 2**30 and size("L", {"L": " "}) is None
    assert TrainOptions(data_cache_limit="3MB").data_cache_limit == 3 * 10**6
