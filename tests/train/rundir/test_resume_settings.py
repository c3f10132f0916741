"""The settings recorded beside each checkpoint and the one-line warning on a resume."""

from __future__ import annotations

from tfyard.train.rundir.checkpoint import (
    machine_settings,
    read_settings,
    settings_difference,
    write_settings,
)

SAVED = {"seed": 3, "strategy": "one_device", "replicas": 1, "jit_compile": True,
         "data_threads": None, "intra_op_threads": 2}


def test_equal_settings_and_unknown_ones_say_nothing():
    assert settings_difference(dict(SAVED), SAVED) is None
    assert settings_difference(SAVED, None) is None                  # no record
    assert settings_difference({**SAVED, "new": 1}, {**SAVED, "old": 2}) is None


def test_each_difference_is_named_in_one_line():
    line = settings_difference({**SAVED, "replicas": 2, "jit_compile": False,
                                "data_threads": 4}, SAVED)
    assert line == ("tfyard: warning: resuming with 2 replicas and XLA off and --data_threads "
                    "4, the checkpoint was written with 1 replica and XLA on and "
                    "--data_threads AUTOTUNE: the run will not be bit-identical to an "
                    "unbroken one")
    assert "\n" not in line


def test_settings_file_follows_its_checkpoint(tmp_path):
    for n in (1, 2):
        (tmp_path / f"ckpt-{n}.index").write_text("")
        write_settings(str(tmp_path / f"ckpt-{n}"), n, SAVED)
    assert read_settings(str(tmp_path / "ckpt-1")) == {"step": 1, **SAVED}
    (tmp_path / "ckpt-1.index").unlink()                   # the manager deleted ckpt-1
    (tmp_path / "ckpt-3.index").write_text("")
    write_settings(str(tmp_path / "ckpt-3"), 3, SAVED)
    assert sorted(p.name for p in tmp_path.glob("*.meta.json")) == [
        "ckpt-2.meta.json", "ckpt-3.meta.json"]
    assert read_settings(str(tmp_path / "ckpt-9")) is None


def test_machine_settings_are_effective_counts():
    settings = machine_settings()
    assert settings["cpus"] >= 1
    assert settings["intra_op_threads"] >= 1 and settings["inter_op_threads"] >= 1
