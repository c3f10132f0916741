"""`publish_save`, the one save publisher (the run's publisher, reconcile, a PBT handover): a
same-named checkpoint unreadable first, the index after the save's other files, the pointer
after the save and naming only what the prefix holds whole, then what it no longer names gone."""

from __future__ import annotations

import pytest

from tfyard.train.rundir.pointer import publish_save

URL = "s3://bucket/run"


class Bucket:
    """The calls a publisher makes on the run's files in the bucket, in order."""

    def __init__(self):
        self.calls = []

    def upload(self, local, path):
        self.calls.append(("upload", path.removeprefix(URL + "/")))

    def write_whole(self, path, text):
        self.calls.append(("put", path.removeprefix(URL + "/"), text))

    def remove(self, path):
        self.calls.append(("delete", path.removeprefix(URL + "/")))


@pytest.mark.parametrize("alone", [False, True])
def test_a_save_is_published_whole_then_what_it_replaced_removed(tmp_path, alone):
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-20"\nall_model_checkpoint_paths: "ckpt-10"\n'
        'all_model_checkpoint_paths: "ckpt-20"\n')
    files = [str(tmp_path / name) for name in ("ckpt-20.index", "ckpt-20.data-00000-of-00001")]
    names = {"run.json", "checkpoints/ckpt-5.index", "checkpoints/ckpt-10.index",
             "checkpoints/ckpt-10.data-00000-of-00001", "checkpoints/ckpt-20.index",
             "checkpoints/ckpt-20.data-00000-of-00002", "checkpoints/checkpoint"}
    store = Bucket()
    text = publish_save(store, URL, files, str(tmp_path / "checkpoint"), names, alone)
    kinds = [call[:2] for call in store.calls]
    assert kinds[:4] == [("delete", "checkpoints/ckpt-20.index"),   # never a mix of two
                         ("upload", "checkpoints/ckpt-20.data-00000-of-00001"),
                         ("upload", "checkpoints/ckpt-20.index"),
                         ("put", "checkpoints/checkpoint")]
    assert ('"ckpt-10"' in text) is not alone and store.calls[3][2] == text
    gone = {name for kind, name in kinds[4:] if kind == "delete"}
    kept = {"checkpoints/ckpt-10.index", "checkpoints/ckpt-10.data-00000-of-00001"}
    assert gone == {"checkpoints/ckpt-5.index", "checkpoints/ckpt-20.data-00000-of-00002",
                    *(kept if alone else ())}
    assert names == {"run.json", "checkpoints/checkpoint", "checkpoints/ckpt-20.index",
                     "checkpoints/ckpt-20.data-00000-of-00001", *(() if alone else kept)}
