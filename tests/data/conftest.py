"""Fixtures shared by the data tests."""

import pytest


@pytest.fixture(scope="session")
def digits_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))
