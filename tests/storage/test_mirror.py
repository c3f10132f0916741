"""`mirror.fetch` puts an object in its local copy by `process.staged`'s scheme: a download cut
short leaves the previous file and no staging, a whole one is stamped with the object's time."""

from __future__ import annotations

import os

import pytest

from tfyard.storage import mirror, stores
from tfyard.storage.location import Location
from tfyard.storage.store import Entry

PLACE = Location("s3", "bucket", "set")


class Cut:
    """A store whose download writes `body`, then fails when `fail` is set."""

    def __init__(self, body: bytes, fail: bool):
        self.body, self.fail = body, fail

    def download(self, place, target, flag, version=None):
        with open(target, "wb") as handle:
            handle.write(self.body)
        if self.fail:
            raise ConnectionError("cut")


@pytest.mark.parametrize("fail", [True, False])
def test_a_fetch_leaves_the_old_file_or_the_whole_new_one(tmp_path, monkeypatch, fail):
    (tmp_path / "a.bin").write_bytes(b"old")
    monkeypatch.setattr(stores, "of", lambda scheme: Cut(b"new" * 100, fail))
    entry = Entry("a.bin", 300, 1_000_000.0)
    if fail:
        with pytest.raises(ConnectionError):
            mirror.fetch(PLACE, entry, str(tmp_path), "--data_dir")
    else:
        mirror.fetch(PLACE, entry, str(tmp_path), "--data_dir")
    assert os.listdir(tmp_path) == ["a.bin"]   # no staging left either way
    assert (tmp_path / "a.bin").read_bytes() == (b"old" if fail else b"new" * 100)
    assert mirror.current(str(tmp_path / "a.bin"), entry) is not fail
